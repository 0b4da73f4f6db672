//! Checks of the Helm chart (`charts/stackgate`) on its rendered manifests.
//!
//! `.ci/chart.sh` installs Helm, renders every option set into `target/chart-render/<name>.yaml`
//! (listed in `target/chart-render/renders.tsv`) and then runs this test. Every document is parsed
//! into its k8s-openapi type, and must serialize back to exactly what was rendered (a misspelt
//! or misplaced field is not silently dropped). Then the invariants that keep a webhook from
//! locking a cluster are checked on every render: the release namespace is never sent to
//! stackgate, `sideEffects: None`, AdmissionReview v1 only, short timeouts, the documented
//! failure policies, probes on the admin port, a non-root read-only container, least-privilege
//! RBAC, TLS material that verifies, and a policy ConfigMap equal to `policies/`.
//!
//! Without renders the test fails: run `.ci/chart.sh`.

#[path = "support/review.rs"]
mod review;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhookConfiguration,
    WebhookClientConfig,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::de::DeserializeOwned;
use serde_json::Value;
use stackgate::sites::delivery::{Scope, registered_scope};

const UID: i64 = 65532;
const MAX_TIMEOUT_SECONDS: i32 = 5;

// ------------------------------------------------------------------------------ loading

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn render_dir() -> PathBuf {
    repo().join("target/chart-render")
}

/// Fails (never skips) when the renders are missing.
fn require_renders() -> PathBuf {
    let dir = render_dir();
    assert!(
        dir.join("renders.tsv").is_file(),
        "{} has no renders: run `.ci/chart.sh` (it installs Helm, renders the chart's option \
         sets and runs this test); the chart tests never pass without renders",
        dir.display()
    );
    dir
}

/// One `helm template` output.
struct Render {
    name: String,
    release: String,
    namespace: String,
    /// (major, minor) the chart was rendered for; `default` is Helm 3.17's v1.32.
    kube: (u32, u32),
    docs: Vec<Value>,
}

impl Render {
    fn has_match_conditions(&self) -> bool {
        self.kube >= (1, 28)
    }

    /// The release's objects of `kind`, but not the uninstall hook's, which exist only while
    /// the hook runs and have their own test
    /// (`uninstall_hook_removes_webhooks_first_with_rbac_naming_each_object`).
    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.docs
            .iter()
            .filter(|d| d["kind"] == kind && !is_uninstall_hook(d))
            .collect()
    }

    /// The uninstall hook's objects of `kind`.
    fn uninstall_hook<T: DeserializeOwned>(&self, kind: &str) -> Vec<T> {
        self.docs
            .iter()
            .filter(|d| d["kind"] == kind && is_uninstall_hook(d))
            .map(|d| serde_json::from_value(d.clone()).expect("checked in parse_all"))
            .collect()
    }

    fn typed<T: DeserializeOwned>(&self, kind: &str) -> Vec<T> {
        self.of_kind(kind)
            .into_iter()
            .map(|d| serde_json::from_value(d.clone()).expect("checked in parse_all"))
            .collect()
    }

    fn one<T: DeserializeOwned>(&self, kind: &str) -> T {
        let mut all = self.typed::<T>(kind);
        assert_eq!(all.len(), 1, "{}: expected exactly one {kind}", self.name);
        all.remove(0)
    }

    fn maybe_one<T: DeserializeOwned>(&self, kind: &str) -> Option<T> {
        let mut all = self.typed::<T>(kind);
        assert!(all.len() <= 1, "{}: more than one {kind}", self.name);
        all.pop()
    }

    fn secret(&self, name: &str) -> Option<Secret> {
        self.typed::<Secret>("Secret")
            .into_iter()
            .find(|s| s.metadata.name.as_deref() == Some(name))
    }
}

/// A pre-delete hook object named `<fullname>-uninstall` (templates/uninstall-hook.yaml).
fn is_uninstall_hook(doc: &Value) -> bool {
    doc["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
        && doc["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-uninstall"))
}

fn parse_version(s: &str) -> (u32, u32) {
    if s == "default" {
        return (1, 32);
    }
    let mut it = s.trim_start_matches('v').split('.');
    let major = it.next().and_then(|p| p.parse().ok());
    let minor = it.next().and_then(|p| p.parse().ok());
    match (major, minor) {
        (Some(a), Some(b)) => (a, b),
        _ => panic!("renders.tsv: bad kube version {s:?}"),
    }
}

fn load_renders() -> Vec<Render> {
    let dir = require_renders();
    let index = fs::read_to_string(dir.join("renders.tsv")).expect("read renders.tsv");
    let renders: Vec<Render> = index
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 4, "renders.tsv: bad line {line:?}");
            let path = dir.join(format!("{}.yaml", f[0]));
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e} (run .ci/chart.sh)", path.display()));
            let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
                .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
            Render {
                name: f[0].to_owned(),
                release: f[1].to_owned(),
                namespace: f[2].to_owned(),
                kube: parse_version(f[3]),
                docs: docs.into_iter().filter(|d| !d.is_null()).collect(),
            }
        })
        .collect();
    let names: BTreeSet<&str> = renders.iter().map(|r| r.name.as_str()).collect();
    for wanted in [
        "default",
        "kube-1.27",
        "kube-1.30",
        "cert-manager",
        "existing-secret",
        "monitoring",
        "live-release",
        "guard",
        "guard-budget",
        "openshift-platform",
        "policies-embedded",
        "policies-overrides",
    ] {
        assert!(
            names.contains(wanted),
            "option set {wanted} was not rendered; .ci/chart.sh lost it"
        );
    }
    renders
}

fn render<'a>(renders: &'a [Render], name: &str) -> &'a Render {
    renders
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no render {name}"))
}

// ------------------------------------------------------------------------------ helpers

fn roundtrip<T: DeserializeOwned + serde::Serialize>(render: &str, doc: &Value) {
    let what = format!(
        "{render}: {} {}",
        doc["kind"].as_str().unwrap_or("?"),
        doc["metadata"]["name"].as_str().unwrap_or("?")
    );
    let typed: T = serde_json::from_value(doc.clone())
        .unwrap_or_else(|e| panic!("{what}: does not parse as the Kubernetes type: {e}"));
    let back = serde_json::to_value(&typed).expect("serialize");
    let mut diffs = Vec::new();
    json_diff("", doc, &back, &mut diffs);
    assert!(
        diffs.is_empty(),
        "{what}: fields were lost or changed when parsed into the Kubernetes type \
         (misspelt, misplaced or empty field?):\n  {}",
        diffs.join("\n  ")
    );
}

/// Paths where two JSON values differ (rendered vs. re-serialized).
fn json_diff(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()).collect::<BTreeSet<_>>() {
                let p = format!("{path}.{k}");
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => json_diff(&p, va, vb, out),
                    (Some(va), None) => {
                        out.push(format!("{p}: rendered {va}, dropped by the type"))
                    }
                    (None, Some(vb)) => out.push(format!("{p}: not rendered, type has {vb}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                json_diff(&format!("{path}[{i}]"), va, vb, out);
            }
        }
        _ if a != b => out.push(format!("{path}: rendered {a}, type has {b}")),
        _ => {}
    }
}

fn meta_of(doc: &Value) -> ObjectMeta {
    serde_json::from_value(doc["metadata"].clone()).expect("metadata")
}

fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    assert!(
        selector.match_expressions.is_none(),
        "only matchLabels expected here"
    );
    selector
        .match_labels
        .as_ref()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

fn env_value(c: &Container, name: &str) -> Option<String> {
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| e.value.clone())
}

fn port_of_addr(addr: &str) -> i32 {
    addr.rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{addr:?} has no port"))
}

fn seconds(duration: &str) -> f64 {
    let (n, unit) = duration
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((duration, "s"), |i| (&duration[..i], &duration[i..]));
    let n: f64 = n
        .parse()
        .unwrap_or_else(|_| panic!("bad duration {duration:?}"));
    match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => panic!("bad duration unit in {duration:?}"),
    }
}

/// Files of a directory (non-recursive), name -> bytes.
fn dir_files(dir: &Path, ext: &str) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == ext))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, fs::read(&p).expect("read"))
        })
        .collect()
}

// ------------------------------------------------------------------------------ webhooks

/// What both webhook kinds have in common, for shared checks.
struct Hook<'a> {
    config: &'a str,
    name: &'a str,
    client: &'a WebhookClientConfig,
    rules: &'a [RuleWithOperations],
    side_effects: &'a str,
    versions: &'a [String],
    match_policy: Option<&'a str>,
    timeout: Option<i32>,
    failure_policy: Option<&'a str>,
    namespace_selector: Option<&'a LabelSelector>,
    object_selector: Option<&'a LabelSelector>,
    match_conditions: usize,
    expressions: Vec<&'a str>,
}

fn mutating_hooks(c: &MutatingWebhookConfiguration) -> Vec<Hook<'_>> {
    c.webhooks
        .iter()
        .flatten()
        .map(|w| Hook {
            config: "mutating",
            name: &w.name,
            client: &w.client_config,
            rules: w.rules.as_deref().unwrap_or_default(),
            side_effects: &w.side_effects,
            versions: &w.admission_review_versions,
            match_policy: w.match_policy.as_deref(),
            timeout: w.timeout_seconds,
            failure_policy: w.failure_policy.as_deref(),
            namespace_selector: w.namespace_selector.as_ref(),
            object_selector: w.object_selector.as_ref(),
            match_conditions: w.match_conditions.as_ref().map_or(0, Vec::len),
            expressions: w
                .match_conditions
                .iter()
                .flatten()
                .map(|m| m.expression.as_str())
                .collect(),
        })
        .collect()
}

/// The ConfigMap/Secret webhooks split objects by label so none is sent twice: named sites
/// without either label, `stackgate.dev/cloud-config` to its webhook, and
/// `stackgate.dev/ccm-values` (CCM chart values, without the other label) to its own — which
/// sends only labelled objects, never every Secret.
fn check_label_partition(render: &str, h: &Hook<'_>, values_label: bool) {
    const SITE: &str = "stackgate.dev/cloud-config";
    const VALUES: &str = "stackgate.dev/ccm-values";
    let expressions: Vec<(&str, &str)> = h
        .object_selector
        .and_then(|s| s.match_expressions.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|e| (e.key.as_str(), e.operator.as_str()))
        .collect();
    let want: &[(&str, &str)] = if h.name.starts_with("ccm-values-labelled.") {
        &[(VALUES, "Exists"), (SITE, "DoesNotExist")]
    } else if h.name.starts_with("cloud-config-labelled.") {
        &[(SITE, "Exists")]
    } else if h.name.starts_with("cloud-config-") && values_label {
        &[(SITE, "DoesNotExist"), (VALUES, "DoesNotExist")]
    } else if h.name.starts_with("cloud-config-") {
        &[(SITE, "DoesNotExist")]
    } else {
        return;
    };
    assert_eq!(expressions, want, "{render}: {} objectSelector", h.name);
}

fn validating_hooks(c: &ValidatingWebhookConfiguration) -> Vec<Hook<'_>> {
    c.webhooks
        .iter()
        .flatten()
        .map(|w| Hook {
            config: "validating",
            name: &w.name,
            client: &w.client_config,
            rules: w.rules.as_deref().unwrap_or_default(),
            side_effects: &w.side_effects,
            versions: &w.admission_review_versions,
            match_policy: w.match_policy.as_deref(),
            timeout: w.timeout_seconds,
            failure_policy: w.failure_policy.as_deref(),
            namespace_selector: w.namespace_selector.as_ref(),
            object_selector: w.object_selector.as_ref(),
            match_conditions: w.match_conditions.as_ref().map_or(0, Vec::len),
            expressions: w
                .match_conditions
                .iter()
                .flatten()
                .map(|m| m.expression.as_str())
                .collect(),
        })
        .collect()
}

fn hook_resources<'a>(h: &'a Hook<'_>) -> BTreeSet<&'a str> {
    h.rules
        .iter()
        .flat_map(|r| r.resources.iter().flatten().map(String::as_str))
        .collect()
}

/// Every `In` list on kubernetes.io/metadata.name in a namespace selector (terms are ANDed).
fn ns_in(sel: &LabelSelector) -> Vec<Vec<&str>> {
    sel.match_expressions
        .iter()
        .flatten()
        .filter(|e| e.key == "kubernetes.io/metadata.name" && e.operator == "In")
        .map(|e| e.values.iter().flatten().map(String::as_str).collect())
        .collect()
}

/// Whether a namespace can pass the selector's `In` terms.
fn ns_admitted(sel: &LabelSelector, ns: &str) -> bool {
    ns_in(sel).iter().all(|v| v.contains(&ns))
}

/// The validating failure policy each webhook must have, as documented in values.yaml: fail
/// open by default (a first install whose pods are not ready blocks no write), fail closed
/// with the chart's values-enforce.yaml (render `enforce`) where the family allows it.
fn expected_validating_policy(r: &Render, hook: &str) -> &'static str {
    let family = hook.split('.').next().unwrap_or_default();
    if r.name != "enforce" {
        return "Ignore";
    }
    // Fail-open families: a blocked Machine deletion stalls control-plane rollouts; a blocked
    // CCM Pod can deadlock a cluster restart (nodes wait for the CCM to be initialised).
    // Service writes are everyday application operations (ovn-source-ranges).
    if family == "control-plane-guard" || family == "ccm-workloads" || family == "ovn-source-ranges"
    {
        return "Ignore";
    }
    let wide = matches!(
        family,
        "cloud-config-configmaps" | "cloud-config-secrets" | "ccm-workloads" | "crs-payloads"
    );
    if wide && !r.has_match_conditions() {
        return "Ignore"; // webhooks.legacy.failurePolicy
    }
    "Fail"
}

fn check_hook(r: &Render, h: &Hook<'_>, service: &Service, ca_bundle: Option<&str>) {
    let what = format!("{}: {} webhook {}", r.name, h.config, h.name);
    assert!(
        h.name.ends_with(".stackgate.dev"),
        "{what}: name must end in .stackgate.dev"
    );
    assert_eq!(h.side_effects, "None", "{what}: sideEffects");
    assert_eq!(
        h.versions,
        ["v1".to_owned()],
        "{what}: admissionReviewVersions must be [v1]"
    );
    assert_eq!(h.match_policy, Some("Equivalent"), "{what}: matchPolicy");
    let timeout = h
        .timeout
        .unwrap_or_else(|| panic!("{what}: timeoutSeconds must be explicit"));
    assert!(
        (1..=MAX_TIMEOUT_SECONDS).contains(&timeout),
        "{what}: timeoutSeconds {timeout} (max {MAX_TIMEOUT_SECONDS})"
    );
    let default_timeout = if h.config == "mutating" { 2 } else { 3 };
    assert_eq!(timeout, default_timeout, "{what}: default timeoutSeconds");

    // The apiserver calls the chart's Service, on the path of its kind, never a URL.
    assert!(h.client.url.is_none(), "{what}: clientConfig.url");
    let svc = h
        .client
        .service
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: no service"));
    assert_eq!(svc.namespace, r.namespace, "{what}: service namespace");
    assert_eq!(
        Some(&svc.name),
        service.metadata.name.as_ref(),
        "{what}: service name"
    );
    let path = if h.config == "mutating" {
        "/mutate"
    } else {
        "/validate"
    };
    assert_eq!(svc.path.as_deref(), Some(path), "{what}: path");
    let webhook_port = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|p| p.iter().find(|p| p.name.as_deref() == Some("webhook")))
        .map(|p| p.port)
        .unwrap_or_else(|| panic!("{}: Service has no port named webhook", r.name));
    assert_eq!(svc.port, Some(webhook_port), "{what}: service port");
    assert_eq!(
        h.client
            .ca_bundle
            .as_ref()
            .map(|b| base64::engine::general_purpose::STANDARD.encode(&b.0)),
        ca_bundle.map(str::to_owned),
        "{what}: caBundle"
    );

    // Never the release namespace; exempted namespaces never.
    let sel = h
        .namespace_selector
        .unwrap_or_else(|| panic!("{what}: no namespaceSelector"));
    assert!(
        sel.match_labels.is_none(),
        "{what}: matchLabels in namespaceSelector"
    );
    let excluded = sel.match_expressions.iter().flatten().any(|e| {
        e.key == "kubernetes.io/metadata.name"
            && e.operator == "NotIn"
            && e.values.iter().flatten().any(|v| *v == r.namespace)
    });
    assert!(
        excluded,
        "{what}: the release namespace {} is not excluded",
        r.namespace
    );
    for ins in ns_in(sel) {
        assert!(
            !ins.contains(&r.namespace.as_str()),
            "{what}: selects its own namespace"
        );
    }
    if r.name == "rollout" {
        assert!(
            ns_in(sel).contains(&vec!["stackgate-test"]),
            "{what}: the rollout stage must send only its test namespace"
        );
    }
    let exempt = sel.match_expressions.iter().flatten().any(|e| {
        e.key == "stackgate.dev/ignore"
            && e.operator == "NotIn"
            && e.values.as_deref() == Some(&["true".to_owned()])
    });
    assert!(
        exempt,
        "{what}: namespaces labelled stackgate.dev/ignore=true are not exempt"
    );

    // Narrow rules: no wildcards, no subresources, the operations of the family.
    for rule in h.rules {
        let lists = [&rule.api_groups, &rule.api_versions, &rule.resources];
        for v in lists.into_iter().flatten().flatten() {
            assert!(!v.contains('*'), "{what}: wildcard {v:?} in rules");
            assert!(!v.contains('/'), "{what}: subresource {v:?} in rules");
        }
        // Resources the registry registers at cluster scope (`Registration::scope`) only in
        // rules of their own: a namespaced rule never matches them.
        let cluster_scoped = rule.api_groups.iter().flatten().all(|g| {
            rule.resources
                .iter()
                .flatten()
                .all(|r| registered_scope(g, r) == Some(Scope::Cluster))
        });
        let scope = if cluster_scoped {
            "Cluster"
        } else {
            "Namespaced"
        };
        assert_eq!(rule.scope.as_deref(), Some(scope), "{what}: scope");
        let ops: BTreeSet<&str> = rule
            .operations
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        let want: BTreeSet<&str> = if h.name.starts_with("control-plane-guard.") {
            ["DELETE"].into()
        } else {
            ["CREATE", "UPDATE"].into()
        };
        assert_eq!(ops, want, "{what}: operations");
    }

    // matchConditions exactly where the cluster supports them.
    if !r.has_match_conditions() {
        assert_eq!(
            h.match_conditions, 0,
            "{what}: matchConditions on Kubernetes < 1.28"
        );
    }
    let family = h.name.split('.').next().unwrap_or_default();
    if r.has_match_conditions()
        && matches!(
            family,
            "cloud-config-configmaps" | "cloud-config-secrets" | "gitops" | "ccm-workloads"
        )
    {
        assert!(
            h.match_conditions > 0,
            "{what}: no matchConditions on Kubernetes >= 1.28"
        );
    }

    // Sensitive and high-volume resources only ever reach stackgate narrowed down.
    let resources = hook_resources(h);
    let label_selected = h.object_selector.is_some_and(|s| {
        s.match_expressions
            .iter()
            .flatten()
            .any(|e| e.operator == "Exists")
    });
    let namespace_limited = !ns_in(sel).is_empty();
    if resources.contains("secrets") || resources.contains("configmaps") {
        assert!(
            h.match_conditions > 0 || label_selected || namespace_limited,
            "{what}: sees every ConfigMap/Secret write in the cluster"
        );
    }
    if resources.contains("pods") {
        assert_eq!(h.config, "validating", "{what}: Pods are never mutated");
        assert!(
            h.match_conditions > 0 || namespace_limited,
            "{what}: sees every Pod write in the cluster"
        );
    }

    // Failure policies as documented.
    let fp = h
        .failure_policy
        .unwrap_or_else(|| panic!("{what}: failurePolicy must be explicit"));
    let want = if h.config == "mutating" {
        "Ignore"
    } else {
        expected_validating_policy(r, h.name)
    };
    assert_eq!(fp, want, "{what}: failurePolicy");
}

// ------------------------------------------------------------------------------ TLS

fn pem_certs(pem: &[u8]) -> Vec<rustls_pki_types::CertificateDer<'static>> {
    use rustls_pki_types::pem::PemObject as _;
    let certs: Vec<_> = rustls_pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .expect("PEM certificates");
    assert!(!certs.is_empty(), "no certificate in PEM");
    certs
}

/// Verifies a serving chain against CA certificates the way a TLS client (the apiserver) does.
fn verify_serving_cert(ca_pem: &[u8], chain_pem: &[u8], names: &[&str]) {
    use rustls::client::danger::ServerCertVerifier as _;
    let mut roots = rustls::RootCertStore::empty();
    for ca in pem_certs(ca_pem) {
        roots
            .add(ca)
            .expect("CA certificate is a usable trust anchor");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .expect("verifier");
    let chain = pem_certs(chain_pem);
    let now = rustls_pki_types::UnixTime::now();
    for name in names {
        let server_name = rustls_pki_types::ServerName::try_from(*name)
            .expect("server name")
            .to_owned();
        verifier
            .verify_server_cert(&chain[0], &chain[1..], &server_name, &[], now)
            .unwrap_or_else(|e| panic!("serving certificate does not verify for {name}: {e}"));
    }
}

fn secret_bytes<'a>(s: &'a Secret, key: &str) -> &'a [u8] {
    s.data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.as_slice())
        .unwrap_or_else(|| panic!("Secret {:?} has no {key}", s.metadata.name))
}

// ------------------------------------------------------------------------------ the tests

/// Every rendered document parses into its Kubernetes type without losing a field, and every
/// namespaced object lands in the release namespace.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn every_document_parses_into_kubernetes_types() {
    for r in load_renders() {
        assert!(!r.docs.is_empty(), "{}: empty render", r.name);
        for doc in &r.docs {
            let kind = doc["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: document without kind", r.name));
            let api = doc["apiVersion"].as_str().unwrap_or_default();
            match kind {
                "Deployment" => roundtrip::<Deployment>(&r.name, doc),
                "Job" => roundtrip::<Job>(&r.name, doc),
                "Service" => roundtrip::<Service>(&r.name, doc),
                "ServiceAccount" => roundtrip::<ServiceAccount>(&r.name, doc),
                "ConfigMap" => roundtrip::<ConfigMap>(&r.name, doc),
                "Secret" => roundtrip::<Secret>(&r.name, doc),
                "PodDisruptionBudget" => roundtrip::<PodDisruptionBudget>(&r.name, doc),
                "ClusterRole" => roundtrip::<ClusterRole>(&r.name, doc),
                "ClusterRoleBinding" => roundtrip::<ClusterRoleBinding>(&r.name, doc),
                "Role" => roundtrip::<Role>(&r.name, doc),
                "RoleBinding" => roundtrip::<RoleBinding>(&r.name, doc),
                "NetworkPolicy" => roundtrip::<NetworkPolicy>(&r.name, doc),
                "CustomResourceDefinition" => {
                    roundtrip::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(&r.name, doc)
                }
                "MutatingWebhookConfiguration" => {
                    roundtrip::<MutatingWebhookConfiguration>(&r.name, doc)
                }
                "ValidatingWebhookConfiguration" => {
                    roundtrip::<ValidatingWebhookConfiguration>(&r.name, doc)
                }
                "Issuer" | "Certificate" => {
                    assert_eq!(api, "cert-manager.io/v1", "{}: {kind}", r.name)
                }
                "ServiceMonitor" => assert_eq!(api, "monitoring.coreos.com/v1", "{}", r.name),
                // Checked in admission_policies_render_where_served_and_match_the_generator.
                "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingAdmissionPolicy"
                | "MutatingAdmissionPolicyBinding" => {}
                other => panic!("{}: unexpected kind {other} (add it to this test)", r.name),
            }
            let meta = meta_of(doc);
            let cluster_scoped = matches!(
                kind,
                "ClusterRole"
                    | "ClusterRoleBinding"
                    | "CustomResourceDefinition"
                    | "MutatingWebhookConfiguration"
                    | "ValidatingWebhookConfiguration"
            ) || kind.contains("AdmissionPolicy");
            if cluster_scoped {
                assert!(
                    meta.namespace.is_none(),
                    "{}: {kind} is cluster-scoped",
                    r.name
                );
            } else if kind != "Role" && kind != "RoleBinding" {
                assert_eq!(
                    meta.namespace.as_deref(),
                    Some(r.namespace.as_str()),
                    "{}: {kind} {:?} outside the release namespace",
                    r.name,
                    meta.name
                );
            }
            let labels = meta.labels.unwrap_or_default();
            assert_eq!(
                labels.get("app.kubernetes.io/instance"),
                Some(&r.release),
                "{}: {kind} {:?} lacks the instance label",
                r.name,
                meta.name
            );
        }
    }
}

/// The webhook configurations: scope, timeouts, failure policies, TLS trust.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn webhooks_are_narrow_short_and_fail_as_documented() {
    for r in load_renders()
        .into_iter()
        // Renders with the webhooks (or a family) switched off have their own tests.
        .filter(|r| {
            !matches!(
                r.name.as_str(),
                "webhook-free" | "admission-policies-switched"
            )
        })
    {
        let service: Service = r.one("Service");
        let fullname = service.metadata.name.clone().expect("service name");
        let cert_manager = !r.of_kind("Certificate").is_empty();
        let ca_bundle: Option<String> = if cert_manager || self_managed(&r) {
            None
        } else if let Some(ca) = r.secret(&format!("{fullname}-ca")) {
            // generated: the -ca Secret's certificate(s), current first
            let mut pem = secret_bytes(&ca, "tls.crt").to_vec();
            if let Some(prev) = ca.data.as_ref().and_then(|d| d.get("previous.crt")) {
                pem.extend_from_slice(&prev.0);
            }
            let bundle = r
                .typed::<ValidatingWebhookConfiguration>("ValidatingWebhookConfiguration")
                .first()
                .and_then(|c| {
                    c.webhooks
                        .as_ref()?
                        .first()?
                        .client_config
                        .ca_bundle
                        .clone()
                })
                .expect("caBundle");
            assert_eq!(
                pem_certs(&bundle.0),
                pem_certs(&pem),
                "{}: caBundle is not the generated CA",
                r.name
            );
            Some(base64::engine::general_purpose::STANDARD.encode(&bundle.0))
        } else {
            // existingSecret: whatever the values gave
            let cfg = r.one::<ValidatingWebhookConfiguration>("ValidatingWebhookConfiguration");
            let b = cfg
                .webhooks
                .as_ref()
                .and_then(|w| w.first()?.client_config.ca_bundle.clone());
            let b = b.unwrap_or_else(|| panic!("{}: no caBundle and no cert-manager", r.name));
            Some(base64::engine::general_purpose::STANDARD.encode(&b.0))
        };

        let mut names = BTreeSet::new();
        let mutating = r.maybe_one::<MutatingWebhookConfiguration>("MutatingWebhookConfiguration");
        let validating =
            r.maybe_one::<ValidatingWebhookConfiguration>("ValidatingWebhookConfiguration");
        let validating = validating.unwrap_or_else(|| panic!("{}: no validating webhooks", r.name));
        let mut hooks = validating_hooks(&validating);
        if let Some(m) = &mutating {
            let mh = mutating_hooks(m);
            for w in m.webhooks.iter().flatten() {
                assert_eq!(
                    w.reinvocation_policy.as_deref(),
                    Some("IfNeeded"),
                    "{}: {} reinvocationPolicy",
                    r.name,
                    w.name
                );
            }
            hooks.extend(mh);
        } else {
            assert_eq!(
                r.name, "minimal",
                "{}: the mutating webhooks are missing",
                r.name
            );
        }
        // The policies-overrides set's sites document has no valuesLabel: no values webhook.
        let values_label = r.name != "policies-overrides";
        assert_eq!(
            hooks
                .iter()
                .any(|h| h.name.starts_with("ccm-values-labelled.")),
            values_label,
            "{}: ccm-values-labelled webhooks",
            r.name
        );
        for h in &hooks {
            check_label_partition(&r.name, h, values_label);
            assert!(
                names.insert((h.config, h.name)),
                "{}: duplicate webhook {}",
                r.name,
                h.name
            );
            check_hook(&r, h, &service, ca_bundle.as_deref());
        }

        for (kind, cfg_meta) in [("ValidatingWebhookConfiguration", &validating.metadata)]
            .into_iter()
            .chain(
                mutating
                    .as_ref()
                    .map(|m| ("MutatingWebhookConfiguration", &m.metadata)),
            )
        {
            let inject = cfg_meta
                .annotations
                .as_ref()
                .and_then(|a| a.get("cert-manager.io/inject-ca-from"));
            if cert_manager {
                let want = format!("{}/{fullname}-tls", r.namespace);
                assert_eq!(inject, Some(&want), "{}: {kind} inject-ca-from", r.name);
                let cert = r
                    .of_kind("Certificate")
                    .into_iter()
                    .find(|c| c["metadata"]["name"] == format!("{fullname}-tls").as_str())
                    .unwrap_or_else(|| panic!("{}: no Certificate {fullname}-tls", r.name));
                let dns: Vec<&str> = cert["spec"]["dnsNames"]
                    .as_array()
                    .expect("dnsNames")
                    .iter()
                    .filter_map(Value::as_str)
                    .collect();
                assert!(
                    dns.contains(&format!("{fullname}.{}.svc", r.namespace).as_str()),
                    "{}: Certificate lacks {fullname}.{}.svc",
                    r.name,
                    r.namespace
                );
                assert_eq!(
                    cert["spec"]["secretName"],
                    format!("{fullname}-tls").as_str()
                );
            } else {
                assert!(
                    inject.is_none(),
                    "{}: {kind} has inject-ca-from without cert-manager",
                    r.name
                );
            }
        }

        // Which families are on in each option set.
        let names: BTreeSet<&str> = names.iter().map(|(_, n)| *n).collect();
        let has = |n: &str| names.contains(n);
        match r.name.as_str() {
            "minimal" => {
                assert_eq!(
                    names,
                    BTreeSet::from([
                        "cloud-config-configmaps.validate.stackgate.dev",
                        "cloud-config-secrets.validate.stackgate.dev",
                        "cloud-config-labelled.validate.stackgate.dev",
                        "ccm-values-labelled.validate.stackgate.dev",
                        "crs-payloads.validate.stackgate.dev",
                        "crs-payload-configmaps.validate.stackgate.dev",
                    ]),
                    "minimal"
                );
            }
            "guard" | "guard-cluster-wide" | "guard-budget" => {
                assert!(
                    has("control-plane-guard.validate.stackgate.dev"),
                    "{}",
                    r.name
                )
            }
            _ => {
                assert!(
                    !has("control-plane-guard.validate.stackgate.dev"),
                    "{}: guard is off by default",
                    r.name
                );
                for family in [
                    "cloud-config-secrets",
                    "cloud-config-labelled",
                    "gitops",
                    "release-annotations",
                ] {
                    assert!(
                        has(&format!("{family}.mutate.stackgate.dev")),
                        "{}: {family} mutate",
                        r.name
                    );
                    assert!(
                        has(&format!("{family}.validate.stackgate.dev")),
                        "{}: {family} validate",
                        r.name
                    );
                }
                assert!(
                    !has("ccm-workloads.mutate.stackgate.dev"),
                    "{}: CCM workloads are never mutated",
                    r.name
                );
                // Services only where the family is on, and only with matchConditions (the
                // apiserver then sends only LoadBalancer Services with ranges or lb-method).
                let ovn = has("ovn-source-ranges.validate.stackgate.dev");
                let want_ovn = r.name == "ovn-source-ranges";
                assert_eq!(ovn, want_ovn, "{}: ovn-source-ranges webhook", r.name);
                assert!(
                    !has("ovn-source-ranges.mutate.stackgate.dev"),
                    "{}: Services are never mutated",
                    r.name
                );
                let ccm = has("ccm-workloads.validate.stackgate.dev");
                let want_ccm = r.has_match_conditions() || r.name == "legacy-ccm";
                assert_eq!(ccm, want_ccm, "{}: ccm-workloads webhook", r.name);
                // ClusterResourceSet payload Secrets: by their type with matchConditions, else
                // only from the namespaces listed (legacy-ccm lists one).
                for verb in ["mutate", "validate"] {
                    let crs = has(&format!("crs-payloads.{verb}.stackgate.dev"));
                    assert_eq!(crs, want_ccm, "{}: crs-payloads {verb} webhook", r.name);
                    // Payload ConfigMaps carry no marker: sent by their data, which needs
                    // matchConditions (else every ConfigMap write would be sent).
                    let by_data = has(&format!("crs-payload-configmaps.{verb}.stackgate.dev"));
                    assert_eq!(
                        by_data,
                        r.has_match_conditions(),
                        "{}: crs-payload-configmaps {verb} webhook",
                        r.name
                    );
                }
                // What CCM workloads read: Secrets and ConfigMaps where CCMs run, only where
                // ccmConfigSource is on (it needs matchConditions), mutated and validated.
                let want_reads = r.name == "ccm-config-source";
                for resource in ["secrets", "configmaps"] {
                    for verb in ["mutate", "validate"] {
                        let name = format!("cloud-config-ccm-{resource}.{verb}.stackgate.dev");
                        assert_eq!(has(&name), want_reads, "{}: {name}", r.name);
                    }
                }
                if want_reads {
                    for h in hooks
                        .iter()
                        .filter(|h| h.name.starts_with("cloud-config-ccm-"))
                    {
                        // Kinds of Secret no CCM config is (or three system ConfigMaps),
                        // then the named sites, which their own webhook sends.
                        assert_eq!(h.match_conditions, 2, "{}: {}", r.name, h.name);
                        let keeps_out = if h.name.contains("secrets") {
                            "'kubernetes.io/service-account-token'"
                        } else {
                            "'kube-root-ca.crt'"
                        };
                        assert!(
                            h.expressions[0].contains(keeps_out),
                            "{}: {}",
                            r.name,
                            h.name
                        );
                        assert!(
                            h.expressions[1].starts_with("!(")
                                && h.expressions[1].contains("request.name == "),
                            "{}: {}",
                            r.name,
                            h.name
                        );
                        let namespaces = h
                            .namespace_selector
                            .as_ref()
                            .and_then(|s| s.match_expressions.as_ref())
                            .into_iter()
                            .flatten()
                            .find(|e| e.key == "kubernetes.io/metadata.name" && e.operator == "In")
                            .and_then(|e| e.values.clone());
                        assert_eq!(
                            namespaces,
                            Some(vec!["kube-system".to_owned()]),
                            "{}: {} is narrowed to where CCMs run",
                            r.name,
                            h.name
                        );
                    }
                }
            }
        }
    }
}

/// Every named cloud-config site of the mounted policy set reaches stackgate: validated always,
/// mutated unless the site says `mutate: false`. The sites are read from the rendered policy
/// ConfigMap (or, with the embedded set, from the chart's copy of `policies/`).
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn every_cloud_config_site_is_matched() {
    for r in load_renders()
        .into_iter()
        // Renders with the webhooks (or a family) switched off have their own tests.
        .filter(|r| {
            !matches!(
                r.name.as_str(),
                "webhook-free" | "admission-policies-switched"
            )
        })
    {
        let files: BTreeMap<String, String> = match r.maybe_one::<ConfigMap>("ConfigMap") {
            Some(cm) => cm.data.unwrap_or_default().into_iter().collect(),
            None => dir_files(&repo().join("charts/stackgate/files/policies"), "yaml")
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8(v).expect("utf-8")))
                .collect(),
        };
        let sites_doc = files
            .values()
            .filter_map(|t| serde_saphyr::from_str::<Value>(t).ok())
            .find(|d| d["kind"] == "CloudConfigSites")
            .unwrap_or_else(|| {
                panic!("{}: no CloudConfigSites document in the policy set", r.name)
            });
        let sites = sites_doc["sites"].as_array().expect("sites");
        assert!(!sites.is_empty(), "{}: no sites", r.name);

        let validating = r.one::<ValidatingWebhookConfiguration>("ValidatingWebhookConfiguration");
        let mutating = r.maybe_one::<MutatingWebhookConfiguration>("MutatingWebhookConfiguration");
        let mut configs = vec![("validate", validating_hooks(&validating))];
        if let Some(m) = &mutating {
            configs.push(("mutate", mutating_hooks(m)));
        }
        for site in sites {
            let kind = site["kind"].as_str().expect("site kind");
            let ns = site["namespace"].as_str().expect("site namespace");
            let name = site["name"].as_str().expect("site name");
            let mutable = site["mutate"] != false;
            let hook_name = format!("cloud-config-{}s", kind.to_lowercase());
            for (verb, hooks) in &configs {
                let hook = hooks
                    .iter()
                    .find(|h| h.name == format!("{hook_name}.{verb}.stackgate.dev"));
                let cond = format!("(request.namespace == '{ns}' && request.name == '{name}')");
                let covered = hook.is_some_and(|h| {
                    let in_ns = h.namespace_selector.is_some_and(|sel| ns_admitted(sel, ns));
                    let by_name = if r.has_match_conditions() {
                        h.expressions.iter().any(|e| e.contains(&cond))
                    } else {
                        true
                    };
                    in_ns && by_name
                });
                // The rollout stage sends only its test namespace.
                let want = (*verb == "validate" || mutable) && r.name != "rollout";
                assert_eq!(
                    covered,
                    want,
                    "{}: site {kind} {ns}/{name} {} by the {verb} webhooks",
                    r.name,
                    if want {
                        "is not matched"
                    } else {
                        "must not be matched"
                    }
                );
            }
        }
    }
}

/// The Deployment: HA, probes on the admin port, a locked-down container, TLS mounted so that
/// rotation works, and no API token unless a feature needs one.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn deployment_is_ha_locked_down_and_probed_on_the_admin_port() {
    for r in load_renders() {
        let d: Deployment = r.one("Deployment");
        let n = &r.name;
        let spec = d.spec.as_ref().expect("spec");
        let replicas = spec.replicas.unwrap_or(1);
        if n == "minimal" {
            assert_eq!(replicas, 1, "{n}");
        } else {
            assert!(replicas >= 2, "{n}: replicas {replicas}");
        }
        let strategy = spec
            .strategy
            .as_ref()
            .and_then(|s| s.rolling_update.as_ref())
            .expect("rollingUpdate");
        assert_eq!(
            strategy.max_unavailable,
            Some(IntOrString::Int(0)),
            "{n}: maxUnavailable"
        );

        let template_labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        assert!(
            selector_matches(&spec.selector, &template_labels),
            "{n}: selector"
        );
        let pod = spec.template.spec.as_ref().expect("pod spec");

        // non-root, seccomp
        let psc = pod.security_context.as_ref().expect("pod securityContext");
        assert_eq!(psc.run_as_non_root, Some(true), "{n}: runAsNonRoot");
        assert_eq!(psc.run_as_user, Some(UID), "{n}: runAsUser");
        assert_eq!(psc.run_as_group, Some(UID), "{n}: runAsGroup");
        assert_eq!(
            psc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault"),
            "{n}: pod seccomp"
        );
        assert_eq!(pod.containers.len(), 1, "{n}: one container");
        assert!(pod.init_containers.is_none(), "{n}: init containers");
        let c = &pod.containers[0];
        let sc = c
            .security_context
            .as_ref()
            .expect("container securityContext");
        assert_eq!(
            sc.allow_privilege_escalation,
            Some(false),
            "{n}: allowPrivilegeEscalation"
        );
        assert_eq!(
            sc.read_only_root_filesystem,
            Some(true),
            "{n}: readOnlyRootFilesystem"
        );
        assert_eq!(
            sc.run_as_non_root,
            Some(true),
            "{n}: container runAsNonRoot"
        );
        assert_ne!(sc.privileged, Some(true), "{n}: privileged");
        assert_ne!(sc.run_as_user, Some(0), "{n}: runAsUser 0");
        let caps = sc.capabilities.as_ref().expect("capabilities");
        assert_eq!(
            caps.drop.as_deref(),
            Some(&["ALL".to_owned()][..]),
            "{n}: drop ALL"
        );
        assert!(caps.add.is_none(), "{n}: added capabilities");
        assert_eq!(
            sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
            Some("RuntimeDefault"),
            "{n}: container seccomp"
        );

        // resources
        let res = c.resources.as_ref().expect("resources");
        for (what, list) in [("requests", &res.requests), ("limits", &res.limits)] {
            let list = list.as_ref().unwrap_or_else(|| panic!("{n}: no {what}"));
            assert!(
                list.contains_key("cpu") && list.contains_key("memory"),
                "{n}: {what} cpu+memory"
            );
        }

        // ports: the webhook (HTTPS) and the admin port (probes, metrics) are distinct
        assert_eq!(
            c.args.as_deref(),
            Some(&["serve".to_owned()][..]),
            "{n}: args"
        );
        let ports = c.ports.as_ref().expect("ports");
        let port = |name: &str| {
            ports
                .iter()
                .find(|p| p.name.as_deref() == Some(name))
                .map(|p| p.container_port)
                .unwrap_or_else(|| panic!("{n}: no container port {name}"))
        };
        let (webhook_port, admin_port) = (port("webhook"), port("admin"));
        assert_ne!(webhook_port, admin_port, "{n}");
        let env = |k: &str| env_value(c, k).unwrap_or_else(|| panic!("{n}: env {k} missing"));
        assert_eq!(
            port_of_addr(&env("STACKGATE_LISTEN")),
            webhook_port,
            "{n}: STACKGATE_LISTEN"
        );
        assert_eq!(
            port_of_addr(&env("STACKGATE_ADMIN_LISTEN")),
            admin_port,
            "{n}: STACKGATE_ADMIN_LISTEN"
        );
        // The allocator returns freed pages at once (BENCHMARKS.md, "The allocator").
        assert_eq!(
            env("MIMALLOC_PURGE_DELAY"),
            "0",
            "{n}: MIMALLOC_PURGE_DELAY"
        );

        // probes: HTTP on the admin port
        let probes = [
            ("startup", &c.startup_probe, "/healthz"),
            ("liveness", &c.liveness_probe, "/healthz"),
            ("readiness", &c.readiness_probe, "/readyz"),
        ];
        for (what, probe, path) in probes {
            let get = probe
                .as_ref()
                .and_then(|p| p.http_get.as_ref())
                .unwrap_or_else(|| panic!("{n}: no {what} httpGet probe"));
            let on_admin = match &get.port {
                IntOrString::Int(p) => *p == admin_port,
                IntOrString::String(s) => s == "admin",
            };
            assert!(on_admin, "{n}: {what} probe is not on the admin port");
            assert_eq!(get.path.as_deref(), Some(path), "{n}: {what} path");
            assert!(
                get.scheme.as_deref().unwrap_or("HTTP") == "HTTP",
                "{n}: {what} scheme"
            );
        }

        // request timeout below every webhook timeout; grace period above the drain time
        let request = seconds(&env("STACKGATE_REQUEST_TIMEOUT"));
        assert!(
            request < 2.0,
            "{n}: STACKGATE_REQUEST_TIMEOUT {request}s >= the 2 s webhook timeout"
        );
        // (the process is gone within delay + grace + ~1 s of SIGTERM)
        let grace = seconds(&env("STACKGATE_SHUTDOWN_GRACE"));
        let delay = seconds(&env("STACKGATE_SHUTDOWN_DELAY"));
        assert!(
            delay >= 1.0,
            "{n}: STACKGATE_SHUTDOWN_DELAY {delay}s leaves endpoints no time to stop routing"
        );
        let tgps = pod
            .termination_grace_period_seconds
            .expect("terminationGracePeriodSeconds");
        assert!(
            tgps as f64 > delay + grace + 1.0,
            "{n}: terminationGracePeriodSeconds {tgps} <= shutdown delay {delay} + grace {grace} + 1"
        );

        // TLS and policies are directory mounts (no subPath): rotation needs the symlink swap
        let volumes = pod.volumes.as_ref().expect("volumes");
        let mounts = c.volume_mounts.as_ref().expect("volumeMounts");
        for m in mounts {
            assert!(
                m.sub_path.is_none() && m.sub_path_expr.is_none(),
                "{n}: subPath on {}",
                m.name
            );
        }
        let mount = |name: &str| {
            mounts
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.mount_path.clone())
        };
        if env_value(c, "STACKGATE_TLS_MODE").as_deref() == Some("self-managed") {
            // The certificate arrives through the API: nothing mounted, no file paths.
            assert!(
                mount("tls").is_none(),
                "{n}: tls mounted in self-managed mode"
            );
            assert!(env_value(c, "STACKGATE_TLS_CERT").is_none(), "{n}");
            let fullname = r.one::<Service>("Service").metadata.name.expect("name");
            assert_eq!(
                env("STACKGATE_TLS_SECRET"),
                format!("{fullname}-certs"),
                "{n}"
            );
            assert_eq!(env("STACKGATE_TLS_NAMESPACE"), r.namespace, "{n}");
            assert_eq!(env("STACKGATE_TLS_WEBHOOK_CONFIGURATION"), fullname, "{n}");
            let names = env("STACKGATE_TLS_DNS_NAMES");
            assert!(
                names
                    .split(',')
                    .any(|d| d == format!("{fullname}.{}.svc", r.namespace)),
                "{n}: {names}"
            );
            let identity = c
                .env
                .iter()
                .flatten()
                .find(|e| e.name == "STACKGATE_TLS_IDENTITY")
                .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
                .map(|f| f.field_path.clone());
            assert_eq!(identity.as_deref(), Some("metadata.name"), "{n}: identity");
            assert_eq!(
                pod.automount_service_account_token,
                Some(true),
                "{n}: self-managed TLS needs the API"
            );
        } else {
            let tls_dir = mount("tls").unwrap_or_else(|| panic!("{n}: tls not mounted"));
            assert!(
                env("STACKGATE_TLS_CERT").starts_with(&format!("{tls_dir}/")),
                "{n}: cert path"
            );
            assert!(
                env("STACKGATE_TLS_KEY").starts_with(&format!("{tls_dir}/")),
                "{n}: key path"
            );
            let tls_vol = volumes
                .iter()
                .find(|v| v.name == "tls")
                .and_then(|v| v.secret.as_ref())
                .expect("tls secret volume");
            assert_eq!(tls_vol.default_mode, Some(0o440), "{n}: key file mode");
            let tls_secret = tls_vol.secret_name.clone().expect("secretName");
            match r.name.as_str() {
                "existing-secret" => assert_eq!(tls_secret, "stackgate-serving", "{n}"),
                _ => assert!(tls_secret.ends_with("-tls"), "{n}: {tls_secret}"),
            }
        }
        for v in volumes {
            if let Some(s) = &v.secret {
                assert!(
                    !s.secret_name
                        .as_deref()
                        .unwrap_or_default()
                        .ends_with("-ca"),
                    "{n}: CA key mounted"
                );
            }
        }
        assert!(mount("tmp").is_some(), "{n}: /tmp emptyDir");

        let policies_dir = env_value(c, "STACKGATE_POLICIES");
        let cm = r.maybe_one::<ConfigMap>("ConfigMap");
        if n == "policies-embedded" {
            assert!(
                policies_dir.is_none() && cm.is_none() && mount("policies").is_none(),
                "{n}"
            );
        } else {
            let dir = policies_dir.unwrap_or_else(|| panic!("{n}: STACKGATE_POLICIES"));
            assert_eq!(mount("policies"), Some(dir), "{n}: policies mount");
            let vol = volumes
                .iter()
                .find(|v| v.name == "policies")
                .and_then(|v| v.config_map.as_ref())
                .expect("policies volume");
            assert_eq!(
                vol.name,
                cm.expect("policy ConfigMap").metadata.name.expect("name"),
                "{n}"
            );
        }

        // Kubernetes API access only where a feature needs it
        let needs_api = matches!(
            n.as_str(),
            "live-release"
                | "guard"
                | "guard-cluster-wide"
                | "guard-budget"
                | "audit"
                | "audit-openreports"
                | "ovn-source-ranges"
                | "ovn-source-ranges-kube-1.27"
                | "openshift-platform"
                | "ccm-config-source"
                | "exceptions"
        );
        assert_eq!(
            pod.automount_service_account_token,
            Some(needs_api || self_managed(&r)),
            "{n}: automountServiceAccountToken"
        );
        // The OpenStackVersion watcher only where its RBAC is granted: a guard-only install
        // that watched without it would hold /readyz on a 403.
        assert_eq!(
            env("STACKGATE_KUBE"),
            if n == "live-release" { "auto" } else { "off" },
            "{n}: STACKGATE_KUBE"
        );
        // The Infrastructure watcher only where its ClusterRole is granted.
        assert_eq!(
            env_value(c, "STACKGATE_OPENSHIFT_PLATFORM").as_deref(),
            (n == "openshift-platform").then_some("auto"),
            "{n}: STACKGATE_OPENSHIFT_PLATFORM"
        );
        // The Deployment and DaemonSet watcher only where its ClusterRole is granted.
        assert_eq!(
            env_value(c, "STACKGATE_CCM_CONFIG_SOURCE").as_deref(),
            (n == "ccm-config-source").then_some("auto"),
            "{n}: STACKGATE_CCM_CONFIG_SOURCE"
        );
        // The StackgateException watcher only where the CRD and its Roles are installed, in
        // exactly the namespaces the Roles are in.
        assert_eq!(
            env_value(c, "STACKGATE_WATCH_EXCEPTIONS").as_deref(),
            (n == "exceptions").then_some("true"),
            "{n}: STACKGATE_WATCH_EXCEPTIONS"
        );
        if n == "exceptions" {
            assert_eq!(
                env_value(c, "STACKGATE_EXCEPTION_NAMESPACES").as_deref(),
                Some("stackgate,platform-exceptions")
            );
            assert_eq!(
                env_value(c, "STACKGATE_EXCEPTION_MAX_LIFETIME_DAYS").as_deref(),
                Some("30")
            );
            assert_eq!(
                env_value(c, "STACKGATE_EXCEPTION_WARN_DAYS").as_deref(),
                Some("7")
            );
            assert_eq!(
                env_value(c, "STACKGATE_EXCEPTION_REQUIRE_EXPIRY").as_deref(),
                Some("false")
            );
            // The CRD's schema follows: `expires` is no longer required (the file, which the
            // default installs, requires it).
            let required = |crd: &Value| -> Vec<String> {
                crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
                    ["required"]
                    .as_array()
                    .expect("spec.required")
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect()
            };
            let crd = r
                .of_kind("CustomResourceDefinition")
                .into_iter()
                .find(|d| d["metadata"]["name"] == "stackgateexceptions.stackgate.dev")
                .expect("the exceptions CRD");
            assert_eq!(required(crd), ["policy", "match", "reason"]);
            let file: Value = serde_saphyr::from_str(
                &fs::read_to_string(
                    repo()
                        .join("charts/stackgate/files/crds/stackgateexceptions.stackgate.dev.yaml"),
                )
                .unwrap(),
            )
            .unwrap();
            assert_eq!(required(&file), ["policy", "match", "reason", "expires"]);
        }
        // The cloud-config object only where its Role is granted.
        let cloud_config = env_value(c, "STACKGATE_CLOUD_CONFIG_OBJECT");
        if n.starts_with("ovn-source-ranges") {
            assert_eq!(
                cloud_config.as_deref(),
                Some("Secret/kube-system/cloud-config"),
                "{n}"
            );
            assert_eq!(
                env_value(c, "STACKGATE_CLOUD_CONFIG_KEY").as_deref(),
                Some("cloud.conf"),
                "{n}"
            );
        } else {
            assert_eq!(cloud_config, None, "{n}: STACKGATE_CLOUD_CONFIG_OBJECT");
        }

        // schedulable before the OpenStack CCM has initialised the nodes
        let tolerates = pod.tolerations.iter().flatten().any(|t| {
            t.key.as_deref() == Some("node.cloudprovider.kubernetes.io/uninitialized")
                && t.operator.as_deref() == Some("Exists")
        });
        assert!(
            tolerates,
            "{n}: does not tolerate node.cloudprovider.kubernetes.io/uninitialized"
        );

        // spread over nodes and zones
        let spread = pod
            .topology_spread_constraints
            .as_ref()
            .unwrap_or_else(|| panic!("{n}: no topology spread"));
        let keys: BTreeSet<&str> = spread.iter().map(|t| t.topology_key.as_str()).collect();
        assert_eq!(
            keys,
            BTreeSet::from(["kubernetes.io/hostname", "topology.kubernetes.io/zone"]),
            "{n}"
        );
        for t in spread {
            assert!(
                selector_matches(
                    t.label_selector.as_ref().expect("labelSelector"),
                    &template_labels
                ),
                "{n}: spread selector"
            );
        }

        // Service, PDB
        let svc: Service = r.one("Service");
        let svc_spec = svc.spec.as_ref().expect("service spec");
        let svc_selector = svc_spec.selector.clone().unwrap_or_default();
        assert!(
            !svc_selector.is_empty()
                && svc_selector
                    .iter()
                    .all(|(k, v)| template_labels.get(k) == Some(v)),
            "{n}: Service selector"
        );
        let targets: BTreeSet<String> = svc_spec
            .ports
            .iter()
            .flatten()
            .map(|p| match &p.target_port {
                Some(IntOrString::String(s)) => s.clone(),
                other => panic!("{n}: Service targetPort {other:?} is not a named port"),
            })
            .collect();
        assert_eq!(
            targets,
            BTreeSet::from(["admin".to_owned(), "webhook".to_owned()]),
            "{n}"
        );
        match r.maybe_one::<PodDisruptionBudget>("PodDisruptionBudget") {
            Some(pdb) => {
                let ps = pdb.spec.expect("pdb spec");
                assert_eq!(
                    ps.min_available,
                    Some(IntOrString::Int(1)),
                    "{n}: minAvailable"
                );
                assert!(
                    selector_matches(
                        ps.selector.as_ref().expect("pdb selector"),
                        &template_labels
                    ),
                    "{n}: PDB selector"
                );
            }
            None => assert_eq!(
                replicas, 1,
                "{n}: {replicas} replicas without a PodDisruptionBudget"
            ),
        }
    }
}

/// (group, resource) of every delivery path `stackgate audit` lists, as the path's webhook
/// registration names them (`src/sites/delivery.rs`): what the audit's RBAC must grant for
/// the delivery paths, so a new path needs no edit here.
fn audit_delivery_resources() -> BTreeSet<(String, String)> {
    use stackgate::sites::delivery::{Audit, REGISTRY};
    REGISTRY
        .iter()
        .filter(|p| p.audit.iter().any(|a| matches!(a, Audit::Listed(..))))
        .flat_map(|p| p.webhook.ok().into_iter().flatten())
        .flat_map(|r| {
            r.resources
                .iter()
                .map(|res| (r.group.to_owned(), (*res).to_owned()))
        })
        .collect()
}

/// RBAC: nothing by default; get/list/watch on openstackversions for live release data;
/// get on clusters, machines (and list), openstackclusters, openstackclusteridentities,
/// namespaces and (namespaced unless asked) secrets for the guard.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn rbac_is_least_privilege() {
    let renders = load_renders();
    let rules_of = |r: &Render| -> Vec<(String, String, BTreeSet<String>)> {
        let mut out = Vec::new();
        let mut push = |rules: Option<Vec<PolicyRule>>| {
            for rule in rules.into_iter().flatten() {
                assert!(rule.non_resource_urls.is_none(), "{}", r.name);
                // resourceNames only for the one cloud-config object (ovn-source-ranges) and
                // the one Infrastructure object (openshift-platform).
                if let Some(names) = &rule.resource_names {
                    if r.name == "openshift-platform" {
                        assert_eq!(names, &vec!["cluster".to_owned()], "{}", r.name);
                    } else {
                        assert_eq!(names, &vec!["cloud-config".to_owned()], "{}", r.name);
                        assert!(r.name.starts_with("ovn-source-ranges"), "{}", r.name);
                    }
                }
                let verbs: BTreeSet<String> = rule.verbs.iter().cloned().collect();
                for g in rule.api_groups.iter().flatten() {
                    for res in rule.resources.iter().flatten() {
                        out.push((g.clone(), res.clone(), verbs.clone()));
                    }
                }
            }
        };
        // The self-managed certificate's roles (`<fullname>-certs`) have their own test:
        // self_managed_tls_is_stable_and_named.
        let tls_role =
            |name: &Option<String>| name.as_deref().is_some_and(|n| n.ends_with("-certs"));
        for cr in r.typed::<ClusterRole>("ClusterRole") {
            assert!(cr.aggregation_rule.is_none(), "{}", r.name);
            if !tls_role(&cr.metadata.name) {
                push(cr.rules);
            }
        }
        for role in r.typed::<Role>("Role") {
            if !tls_role(&role.metadata.name) {
                push(role.rules);
            }
        }
        out
    };
    let set = |v: &[&str]| {
        v.iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<String>>()
    };

    for r in &renders {
        let rules = rules_of(r);
        for (g, res, verbs) in &rules {
            assert!(
                !g.contains('*') && !res.contains('*'),
                "{}: wildcard in RBAC",
                r.name
            );
            // Writes: only the background audit's own results and its Lease.
            let allowed = match (g.as_str(), res.as_str()) {
                ("wgpolicyk8s.io", "policyreports" | "clusterpolicyreports")
                | ("openreports.io", "reports" | "clusterreports") => {
                    set(&["get", "list", "create", "patch"])
                }
                ("coordination.k8s.io", "leases") => set(&["get", "create", "update"]),
                _ => set(&["get", "list", "watch"]),
            };
            assert!(
                verbs.is_subset(&allowed),
                "{}: {res} verbs {verbs:?}",
                r.name
            );
            // audit.listSecrets (audit-openreports) is the one opt-in cluster-wide list.
            if res == "secrets"
                && !r.name.starts_with("ovn-source-ranges")
                && r.name != "audit-openreports"
            {
                assert_eq!(verbs, &set(&["get"]), "{}: secrets are get only", r.name);
            }
        }
        for b in r.typed::<ClusterRoleBinding>("ClusterRoleBinding") {
            for s in b.subjects.iter().flatten() {
                assert_eq!(
                    (s.kind.as_str(), s.namespace.as_deref()),
                    ("ServiceAccount", Some(r.namespace.as_str())),
                    "{}",
                    r.name
                );
            }
        }
        for b in r.typed::<RoleBinding>("RoleBinding") {
            assert_eq!(b.role_ref.kind, "Role", "{}", r.name);
            for s in b.subjects.iter().flatten() {
                assert_eq!(
                    (s.kind.as_str(), s.namespace.as_deref()),
                    ("ServiceAccount", Some(r.namespace.as_str())),
                    "{}",
                    r.name
                );
            }
        }
        let got: BTreeSet<(String, String)> = rules
            .iter()
            .map(|(g, res, _)| (g.clone(), res.clone()))
            .collect();
        let pair = |g: &str, res: &str| (g.to_owned(), res.to_owned());
        let want: BTreeSet<(String, String)> = match r.name.as_str() {
            "live-release" => [pair("core.openstack.org", "openstackversions")].into(),
            "guard" | "guard-cluster-wide" | "guard-budget" => [
                pair("cluster.x-k8s.io", "clusters"),
                pair("cluster.x-k8s.io", "machines"),
                pair("infrastructure.cluster.x-k8s.io", "openstackclusters"),
                pair(
                    "infrastructure.cluster.x-k8s.io",
                    "openstackclusteridentities",
                ),
                pair("", "namespaces"),
                pair("", "secrets"),
            ]
            .into(),
            // The audit reads every delivery path it lists (from the registry) and the other
            // kinds its policies name; it writes its reports and takes its Lease.
            "audit" | "audit-openreports" => {
                let mut want = audit_delivery_resources();
                want.extend([
                    pair("", "pods"),
                    pair("", "services"),
                    pair("apps", "daemonsets"),
                    pair("apps", "deployments"),
                    pair("core.openstack.org", "openstackversions"),
                    pair("glance.openstack.org", "glances"),
                    pair("manila.openstack.org", "manilas"),
                    pair("openreports.io", "reports"),
                    pair("openreports.io", "clusterreports"),
                    pair("coordination.k8s.io", "leases"),
                ]);
                if r.name == "audit" {
                    want.insert(pair("wgpolicyk8s.io", "policyreports"));
                    want.insert(pair("wgpolicyk8s.io", "clusterpolicyreports"));
                }
                want
            }
            "ovn-source-ranges" | "ovn-source-ranges-kube-1.27" => [pair("", "secrets")].into(),
            "openshift-platform" => [pair("config.openshift.io", "infrastructures")].into(),
            // list and watch only, in each accepted namespace (Roles, never a ClusterRole).
            "exceptions" => {
                for (_, _, verbs) in &rules {
                    assert_eq!(verbs, &set(&["list", "watch"]), "{}", r.name);
                }
                let roles: Vec<Role> = r.typed("Role");
                let mut namespaces: Vec<_> = roles
                    .iter()
                    .filter(|role| {
                        role.rules.iter().flatten().any(|rule| {
                            rule.resources
                                .iter()
                                .flatten()
                                .any(|res| res == "stackgateexceptions")
                        })
                    })
                    .filter_map(|role| role.metadata.namespace.clone())
                    .collect();
                namespaces.sort();
                assert_eq!(
                    namespaces,
                    ["platform-exceptions", "stackgate"],
                    "{}",
                    r.name
                );
                [pair("stackgate.dev", "stackgateexceptions")].into()
            }
            // list and watch only (no get): the watcher never reads one by name.
            "ccm-config-source" => {
                for (_, _, verbs) in &rules {
                    assert_eq!(verbs, &set(&["list", "watch"]), "{}", r.name);
                }
                [pair("apps", "deployments"), pair("apps", "daemonsets")].into()
            }
            _ => BTreeSet::new(),
        };
        assert_eq!(got, want, "{}: RBAC resources", r.name);
        if r.name == "audit" {
            // watch on exactly the kinds the background audit re-audits on change (its
            // metadata-only watches); never on Secrets, pods or OpenStackVersions.
            let mut watched = audit_delivery_resources();
            watched.remove(&pair("", "secrets"));
            watched.extend([
                pair("apps", "daemonsets"),
                pair("apps", "deployments"),
                pair("glance.openstack.org", "glances"),
                pair("manila.openstack.org", "manilas"),
            ]);
            for (g, res, verbs) in &rules {
                let watched = watched.contains(&(g.clone(), res.clone()));
                assert_eq!(
                    verbs.contains("watch"),
                    watched,
                    "audit: {g}/{res} verbs {verbs:?}"
                );
            }
            // Secrets: get only, through Roles in audit.secretNamespaces; the Lease only in
            // the release namespace.
            let roles: BTreeSet<(String, String)> = r
                .typed::<Role>("Role")
                .into_iter()
                .filter(|role| {
                    !role
                        .metadata
                        .name
                        .as_deref()
                        .unwrap_or_default()
                        .ends_with("-certs")
                })
                .flat_map(|role| {
                    let ns = role.metadata.namespace.clone().unwrap_or_default();
                    role.rules
                        .unwrap_or_default()
                        .into_iter()
                        .flat_map(|rule| rule.resources.unwrap_or_default())
                        .map(move |res| (ns.clone(), res))
                })
                .collect();
            assert_eq!(
                roles,
                [
                    ("kube-system".to_owned(), "secrets".to_owned()),
                    ("capi-prod".to_owned(), "secrets".to_owned()),
                    (r.namespace.clone(), "leases".to_owned()),
                ]
                .into(),
                "audit: Roles"
            );
        }
        if r.name.starts_with("ovn-source-ranges") {
            // The one Secret, by name, in its namespace: no ClusterRole at all.
            assert!(
                not_tls(r.typed::<ClusterRole>("ClusterRole")).is_empty(),
                "{}",
                r.name
            );
            let roles = not_tls(r.typed::<Role>("Role"));
            assert_eq!(roles.len(), 1, "{}", r.name);
            assert_eq!(
                roles[0].metadata.namespace.as_deref(),
                Some("kube-system"),
                "{}",
                r.name
            );
            assert_eq!(
                rules[0].2,
                set(&["get", "list", "watch"]),
                "{}: cloud-config verbs",
                r.name
            );
        }
        if r.name == "live-release" {
            assert_eq!(
                rules[0].2,
                set(&["get", "list", "watch"]),
                "live-release verbs"
            );
        }
        if r.name == "guard" {
            // Secrets only in the listed namespaces, through Roles.
            let cluster_secrets = r
                .typed::<ClusterRole>("ClusterRole")
                .into_iter()
                .flat_map(|c| c.rules.unwrap_or_default())
                .any(|rule| rule.resources.iter().flatten().any(|x| x == "secrets"));
            assert!(!cluster_secrets, "guard: cluster-wide secrets access");
            let role_ns: BTreeSet<String> = not_tls(r.typed::<Role>("Role"))
                .into_iter()
                .filter_map(|x| x.metadata.namespace)
                .collect();
            assert_eq!(
                role_ns,
                set(&["capi-prod", "capi-staging"]),
                "guard: Role namespaces"
            );
        }
    }
}

/// Chart-generated TLS: the serving certificate verifies against the CA in caBundle for the
/// Service's DNS names, exactly as the apiserver checks it.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn generated_certificates_verify_for_the_service_name() {
    let renders = load_renders();
    let mut checked = 0;
    for r in &renders {
        let service: Service = r.one("Service");
        let fullname = service.metadata.name.clone().expect("name");
        let (Some(ca), Some(tls)) = (
            r.secret(&format!("{fullname}-ca")),
            r.secret(&format!("{fullname}-tls")),
        ) else {
            continue;
        };
        assert_eq!(
            tls.type_.as_deref(),
            Some("kubernetes.io/tls"),
            "{}",
            r.name
        );
        assert_eq!(
            secret_bytes(&tls, "ca.crt"),
            secret_bytes(&ca, "tls.crt"),
            "{}: ca.crt",
            r.name
        );
        let names = [
            format!("{fullname}.{}.svc", r.namespace),
            format!("{fullname}.{}.svc.cluster.local", r.namespace),
        ];
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        verify_serving_cert(
            secret_bytes(&ca, "tls.crt"),
            secret_bytes(&tls, "tls.crt"),
            &names,
        );
        assert!(!secret_bytes(&tls, "tls.key").is_empty(), "{}", r.name);
        for s in [&ca, &tls] {
            let ann = s.metadata.annotations.clone().unwrap_or_default();
            let not_after: i64 = ann
                .get("stackgate.dev/not-after-unix")
                .and_then(|v| v.parse().ok())
                .expect("not-after-unix");
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_secs() as i64;
            assert!(
                not_after > now + 300 * 86400,
                "{}: certificate ends too soon",
                r.name
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 2,
        "only {checked} renders with generated certificates"
    );
}

/// certs/gen-dev-certs.sh output (made by .ci/chart.sh) verifies for the in-cluster name and
/// for 127.0.0.1.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn dev_certificates_verify() {
    let dir = require_renders().join("dev-certs");
    let read = |f: &str| {
        fs::read(dir.join(f))
            .unwrap_or_else(|e| panic!("{}/{f}: {e} (run .ci/chart.sh)", dir.display()))
    };
    verify_serving_cert(
        &read("ca.crt"),
        &read("tls.crt"),
        &[
            "stackgate.stackgate.svc",
            "stackgate.stackgate.svc.cluster.local",
            "127.0.0.1",
            "localhost",
        ],
    );
    let bundle = String::from_utf8(read("caBundle.b64")).expect("utf-8");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(bundle.trim())
        .expect("base64");
    assert_eq!(decoded, read("ca.crt"), "caBundle.b64 is base64 of ca.crt");
}

/// The policy ConfigMap carries the chart's copy of policies/ byte for byte (plus overrides),
/// and that copy equals the repository's policies/.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn policy_configmap_equals_policies_dir() {
    let repo_policies = dir_files(&repo().join("policies"), "yaml");
    let chart_policies = dir_files(&repo().join("charts/stackgate/files/policies"), "yaml");
    assert!(!repo_policies.is_empty(), "policies/ has no *.yaml");
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&chart_policies),
        names(&repo_policies),
        "charts/stackgate/files/policies/ and policies/ hold different files: \
         run `cp policies/*.yaml charts/stackgate/files/policies/` (and remove stale copies)"
    );
    for (name, bytes) in &repo_policies {
        assert!(
            chart_policies[name] == *bytes,
            "charts/stackgate/files/policies/{name} differs from policies/{name}: \
             run `cp policies/*.yaml charts/stackgate/files/policies/`"
        );
    }

    for r in load_renders() {
        let Some(cm) = r.maybe_one::<ConfigMap>("ConfigMap") else {
            assert_eq!(
                r.name, "policies-embedded",
                "{}: no policy ConfigMap",
                r.name
            );
            continue;
        };
        let data = cm.data.unwrap_or_default();
        let mut want: BTreeMap<String, String> = chart_policies
            .iter()
            .map(|(k, v)| (k.clone(), String::from_utf8(v.clone()).expect("utf-8")))
            .collect();
        if r.name == "policies-overrides" {
            want.remove("serial-lb-api-calls.yaml");
            let sites = data
                .get("cloud-config-sites.yaml")
                .expect("overridden sites file");
            assert!(
                sites.contains("namespace: cloud-team"),
                "override not applied"
            );
            want.insert("cloud-config-sites.yaml".to_owned(), sites.clone());
        }
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{}: policy files",
            r.name
        );
        for (k, v) in &want {
            assert!(
                data[k] == *v,
                "{}: {k} in the ConfigMap is not byte-identical to the chart's file",
                r.name
            );
        }
    }
}

/// Optional integrations, when on, point at things that exist.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn service_monitor_and_network_policy_use_the_named_ports() {
    let renders = load_renders();
    let r = render(&renders, "monitoring");
    let sm = r.of_kind("ServiceMonitor");
    assert_eq!(sm.len(), 1, "monitoring: ServiceMonitor");
    let ep = &sm[0]["spec"]["endpoints"][0];
    assert_eq!(ep["port"], "admin");
    assert_eq!(ep["path"], "/metrics");
    let np: NetworkPolicy = r.one("NetworkPolicy");
    let ports: BTreeSet<String> = np
        .spec
        .and_then(|s| s.ingress)
        .into_iter()
        .flatten()
        .flat_map(|i| i.ports.into_iter().flatten())
        .filter_map(|p| match p.port {
            Some(IntOrString::String(s)) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(
        ports,
        BTreeSet::from(["admin".to_owned(), "webhook".to_owned()])
    );
    for r in &renders {
        if r.name != "monitoring" {
            assert!(
                r.of_kind("ServiceMonitor").is_empty() && r.of_kind("NetworkPolicy").is_empty(),
                "{}: off by default",
                r.name
            );
        }
    }
}

/// The renders are of the chart as it is now (.ci/chart.sh keeps a copy of what it rendered).
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn renders_are_current() {
    let snapshot = require_renders().join("chart-snapshot");
    let chart = repo().join("charts/stackgate");
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.insert(
                    p.strip_prefix(base).expect("prefix").to_path_buf(),
                    fs::read(&p).expect("read"),
                );
            }
        }
    }
    let (mut a, mut b) = (BTreeMap::new(), BTreeMap::new());
    walk(&snapshot, &snapshot, &mut a);
    walk(&chart, &chart, &mut b);
    assert!(
        a == b,
        "target/chart-render is stale: the chart changed since it was rendered; run .ci/chart.sh"
    );
}

// ------------------------------------------------------------------------------ guard budget

/// The control-plane guard's time budget: its OpenStack settings are passed only when it is
/// on, each Keystone/Octavia call fits in the review deadline, which fits in the guard
/// webhook's timeout, and the chart's defaults are the binary's.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn guard_calls_fit_in_the_request_deadline() {
    let renders = load_renders();
    let mut guarded = 0;
    for r in &renders {
        let n = &r.name;
        let d: Deployment = r.one("Deployment");
        let pod = d.spec.and_then(|s| s.template.spec).expect("pod spec");
        let c = &pod.containers[0];
        let env = |k: &str| env_value(c, k);
        let on = env("STACKGATE_LB_GUARD").as_deref() == Some("on");
        let webhook = r
            .maybe_one::<ValidatingWebhookConfiguration>("ValidatingWebhookConfiguration")
            .and_then(|v| v.webhooks)
            .into_iter()
            .flatten()
            .find(|w| w.name.starts_with("control-plane-guard."));
        assert_eq!(on, webhook.is_some(), "{n}: guard on <=> guard webhook");
        if !on {
            for k in ["STACKGATE_OPENSTACK_TIMEOUT", "STACKGATE_OCTAVIA_CACHE_TTL"] {
                assert!(env(k).is_none(), "{n}: {k} without the guard");
            }
            continue;
        }
        guarded += 1;
        let get = |k: &str| env(k).unwrap_or_else(|| panic!("{n}: {k} missing with the guard"));
        let call = seconds(&get("STACKGATE_OPENSTACK_TIMEOUT"));
        let ttl = seconds(&get("STACKGATE_OCTAVIA_CACHE_TTL"));
        let request = seconds(&get("STACKGATE_REQUEST_TIMEOUT"));
        let webhook_timeout = f64::from(
            webhook
                .and_then(|w| w.timeout_seconds)
                .expect("guard webhook timeoutSeconds"),
        );
        assert!(
            0.0 < call && call < request && request < webhook_timeout,
            "{n}: OpenStack call {call}s < request deadline {request}s < guard webhook \
             timeout {webhook_timeout}s does not hold"
        );
        assert!(ttl >= 0.0, "{n}: cache TTL");
        match n.as_str() {
            "guard-budget" => assert_eq!(
                (call, ttl, request),
                (1.2, 0.0, 1.8),
                "{n}: the values of ci/guard-budget-values.yaml"
            ),
            _ => {
                assert_eq!(
                    call,
                    stackgate::guard::DEFAULT_OPENSTACK_TIMEOUT.as_secs_f64(),
                    "{n}: chart default controlPlaneGuard.openstackTimeout != the binary's"
                );
                assert_eq!(
                    ttl,
                    stackgate::guard::DEFAULT_OCTAVIA_CACHE_TTL.as_secs_f64(),
                    "{n}: chart default controlPlaneGuard.octaviaCacheTTL != the binary's"
                );
            }
        }
    }
    assert!(guarded >= 3, "only {guarded} renders with the guard on");
}

/// Every STACKGATE_* variable the chart sets is a flag of `stackgate serve`, with a value the
/// flag accepts (a misspelt variable would be ignored silently by the server).
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn every_rendered_env_var_is_a_serve_flag() {
    use clap::CommandFactory as _;
    let cli = stackgate::cli::Cli::command();
    let serve = cli
        .get_subcommands()
        .find(|s| s.get_name() == "serve")
        .expect("serve subcommand");
    // `serve`'s own flags and the global ones (logging), which clap accepts after `serve`.
    let flags: BTreeMap<String, &clap::Arg> = serve
        .get_arguments()
        .chain(cli.get_arguments().filter(|a| a.is_global_set()))
        .filter_map(|a| Some((a.get_env()?.to_string_lossy().into_owned(), a)))
        .collect();
    for r in load_renders() {
        let d: Deployment = r.one("Deployment");
        let pod = d.spec.and_then(|s| s.template.spec).expect("pod spec");
        let mut argv = vec!["stackgate".to_owned(), "serve".to_owned()];
        for e in pod.containers[0].env.iter().flatten() {
            if !e.name.starts_with("STACKGATE_") {
                continue;
            }
            let arg = flags
                .get(&e.name)
                .unwrap_or_else(|| panic!("{}: {} is no `stackgate serve` flag", r.name, e.name));
            // A value from the pod (the background audit's identity is the pod name).
            let from_pod = e
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|_| "stackgate-0".to_owned());
            let value = e.value.clone().or(from_pod).expect("literal value");
            let long = arg.get_long().expect("long flag");
            argv.push(format!("--{long}={value}"));
        }
        if let Err(e) = cli.clone().try_get_matches_from(&argv) {
            panic!(
                "{}: `stackgate serve` refuses the chart's settings: {e}",
                r.name
            );
        }
    }
}

// ------------------------------------------------------------------------------ GitOps parity

/// One object per GitOps carrier kind the engine reads (`src/sites/helm.rs`), from the
/// fixture repository of `stackgate check`; the RKE2 HelmChartConfig is the HelmChart's
/// `valuesContent` in the object that customises a HelmChart of the same name; the k0s
/// ClusterConfig is the carriers fixture's.
fn gitops_objects() -> Vec<Value> {
    let read = |rel: &str| -> Vec<Value> {
        let path = repo().join("tests/fixtures/gitops/repo").join(rel);
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_saphyr::from_multiple::<Value>(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let mut objects: Vec<Value> = [
        "flux/occm-helmrelease.yaml",
        "argocd/occm-values-string.yaml",
    ]
    .into_iter()
    .flat_map(read)
    .filter(|d| matches!(d["kind"].as_str(), Some("HelmRelease" | "Application")))
    .collect();
    let chart = read("rke2/occm-helmchart.yaml").remove(0);
    assert_eq!(chart["kind"], "HelmChart");
    let config = serde_json::json!({
        "apiVersion": "helm.cattle.io/v1",
        "kind": "HelmChartConfig",
        "metadata": chart["metadata"].clone(),
        "spec": {"valuesContent": chart["spec"]["valuesContent"].clone()},
    });
    objects.push(chart);
    objects.push(config);
    let k0s = repo().join("tests/fixtures/gitops/carriers/parity/k0s-clusterconfig.yaml");
    let text = fs::read_to_string(&k0s).unwrap_or_else(|e| panic!("{}: {e}", k0s.display()));
    objects.push(serde_saphyr::from_str::<Value>(&text).expect("k0s ClusterConfig"));
    // The delivery paths of src/sites/delivery.rs that embed a k0s ClusterConfig or hold
    // values stackgate says it cannot see (k0smotron, Azimuth, Giant Swarm).
    let samples = repo().join("tests/fixtures/delivery/chart-samples.yaml");
    let text =
        fs::read_to_string(&samples).unwrap_or_else(|e| panic!("{}: {e}", samples.display()));
    objects.extend(serde_saphyr::from_multiple::<Value>(&text).expect("delivery samples"));
    objects
}

/// Whether the webhook's engine finds the CCM values in `object` (a denial or warning on
/// /validate, or a patch on /mutate), for the review the apiserver sends on create.
fn engine_acts_on(object: &Value) -> bool {
    use stackgate::admission::{self, Webhook};
    let engine =
        stackgate::engine::Engine::new(stackgate::policy::PolicySet::embedded().expect("policies"));
    let body = serde_json::to_vec(&review::review_for(object, "chart")).expect("json");
    [Webhook::Validate, Webhook::Mutate].into_iter().any(|w| {
        let reply = admission::handle(&engine, w, &body, &stackgate::metrics::Metrics::new());
        assert_eq!(reply.status, 200);
        let response =
            serde_json::from_slice::<Value>(&reply.body).expect("review")["response"].clone();
        response["allowed"] == false
            || response["warnings"]
                .as_array()
                .is_some_and(|w| !w.is_empty())
            || response["patch"].is_string()
    })
}

/// The gitops webhooks and `stackgate check` see the same objects: every (group, version,
/// resource) the rules register is a kind the engine reads, and every kind the engine reads
/// is registered (HelmChart and HelmChartConfig alike), on mutate and validate, in every
/// render with the family on. The matchConditions are the same for all of them.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn gitops_webhooks_register_every_kind_the_engine_reads() {
    let objects = gitops_objects();
    let gvr = |o: &Value| -> (String, String, String) {
        let review = review::review_for(o, "x");
        let r = &review["request"]["resource"];
        let s = |k: &str| r[k].as_str().expect("gvr").to_owned();
        (s("group"), s("version"), s("resource"))
    };
    for o in &objects {
        assert!(engine_acts_on(o), "the engine does not read {}", o["kind"]);
    }
    let mut checked = 0;
    for r in load_renders()
        .into_iter()
        .filter(|r| r.name != "webhook-free")
    {
        let validating = r.one::<ValidatingWebhookConfiguration>("ValidatingWebhookConfiguration");
        let mutating = r.maybe_one::<MutatingWebhookConfiguration>("MutatingWebhookConfiguration");
        let mut hooks = validating_hooks(&validating);
        if let Some(m) = &mutating {
            hooks.extend(mutating_hooks(m));
        }
        for h in hooks.iter().filter(|h| h.name.starts_with("gitops.")) {
            checked += 1;
            let what = format!("{}: {} webhook {}", r.name, h.config, h.name);
            let registered: BTreeSet<(String, String, String)> = h
                .rules
                .iter()
                .flat_map(|rule| {
                    let groups = rule.api_groups.clone().unwrap_or_default();
                    let versions = rule.api_versions.clone().unwrap_or_default();
                    let resources = rule.resources.clone().unwrap_or_default();
                    groups.into_iter().flat_map(move |g| {
                        let resources = resources.clone();
                        versions.clone().into_iter().flat_map(move |v| {
                            let g = g.clone();
                            resources
                                .clone()
                                .into_iter()
                                .map(move |res| (g.clone(), v.clone(), res))
                        })
                    })
                })
                .collect();
            for o in &objects {
                let key = gvr(o);
                assert!(
                    registered.contains(&key),
                    "{what}: {key:?} ({}) is read by the engine (`stackgate check` reports \
                     it) but not registered",
                    o["kind"]
                );
            }
            for (g, v, res) in &registered {
                let sample = objects
                    .iter()
                    .find(|o| {
                        let (og, _, ores) = gvr(o);
                        og == *g && ores == *res
                    })
                    .unwrap_or_else(|| {
                        panic!("{what}: registers {g}/{res}, which the engine does not read")
                    });
                let mut o = sample.clone();
                o["apiVersion"] = Value::String(format!("{g}/{v}"));
                assert!(
                    engine_acts_on(&o),
                    "{what}: registers {g}/{v} {res}, which the engine does not read"
                );
            }
            if r.has_match_conditions() {
                assert_eq!(
                    h.expressions.len(),
                    1,
                    "{what}: one spec-changed condition for every GitOps kind"
                );
                assert!(
                    !h.expressions[0].contains("helmchart"),
                    "{what}: a kind-specific condition"
                );
            }
        }
    }
    assert!(checked >= 10, "only {checked} gitops webhooks checked");
}

// ------------------------------------------------------------------------ audit (issue 22/23/27)

/// The background audit reads every kind `stackgate audit` lists (k0s ClusterConfigs
/// included), writes the report APIs `audit.reportApi` names, and lists Secrets cluster-wide
/// only when `audit.listSecrets` asks for it.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn audit_rbac_follows_the_report_api_and_the_audit_targets() {
    let renders = load_renders();
    let cluster_rules = |r: &Render| -> BTreeMap<(String, String), BTreeSet<String>> {
        let mut out = BTreeMap::new();
        for cr in r.typed::<ClusterRole>("ClusterRole") {
            if !cr
                .metadata
                .name
                .as_deref()
                .unwrap_or("")
                .ends_with("-audit")
            {
                continue;
            }
            for rule in cr.rules.unwrap_or_default() {
                for g in rule.api_groups.iter().flatten() {
                    for res in rule.resources.iter().flatten() {
                        out.entry((g.clone(), res.clone()))
                            .or_insert_with(BTreeSet::new)
                            .extend(rule.verbs.iter().cloned());
                    }
                }
            }
        }
        out
    };
    let report_api_env = |r: &Render| {
        let d: Deployment = r.one("Deployment");
        let c = &d.spec.unwrap().template.spec.unwrap().containers[0];
        env_value(c, "STACKGATE_BACKGROUND_AUDIT_REPORT_API")
    };
    let key = |g: &str, res: &str| (g.to_owned(), res.to_owned());
    let verbs = |v: &[&str]| {
        v.iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<String>>()
    };

    // Every GitOps kind `stackgate audit` lists is granted (the audit's targets).
    let engine = stackgate::engine::Engine::new(
        stackgate::policy::PolicySet::embedded().expect("embedded policies"),
    );
    let audit = render(&renders, "audit");
    let rules = cluster_rules(audit);
    for target in stackgate::audit::targets(&engine) {
        let ar = &target.resource;
        if ar.group.is_empty() && ar.plural == "secrets" {
            continue; // Secrets: get through Roles, or audit.listSecrets (below).
        }
        let granted = rules.get(&key(&ar.group, &ar.plural)).unwrap_or_else(|| {
            panic!(
                "audit: {}/{} is listed but not granted",
                ar.group, ar.plural
            )
        });
        assert!(
            granted.contains("list"),
            "{}/{}: {granted:?}",
            ar.group,
            ar.plural
        );
    }
    assert_eq!(
        rules.get(&key("k0s.k0sproject.io", "clusterconfigs")),
        Some(&verbs(&["get", "list", "watch"]))
    );
    // auto: both report APIs, and the env var that selects it.
    assert!(rules.contains_key(&key("wgpolicyk8s.io", "policyreports")));
    assert!(rules.contains_key(&key("openreports.io", "reports")));
    assert!(rules.contains_key(&key("openreports.io", "clusterreports")));
    assert!(!rules.contains_key(&key("", "secrets")));
    assert_eq!(report_api_env(audit).as_deref(), Some("auto"));

    // openreports only, with a cluster-wide list of Secrets.
    let or = render(&renders, "audit-openreports");
    let rules = cluster_rules(or);
    assert!(rules.contains_key(&key("openreports.io", "reports")));
    assert!(!rules.contains_key(&key("wgpolicyk8s.io", "policyreports")));
    assert!(!rules.contains_key(&key("wgpolicyk8s.io", "clusterpolicyreports")));
    assert_eq!(
        rules.get(&key("", "secrets")),
        Some(&verbs(&["list", "watch"]))
    );
    assert_eq!(report_api_env(or).as_deref(), Some("openreports"));
}

/// `admissionPolicies.enabled`: the generated policies are rendered only for a Kubernetes
/// version that serves their API, equal to what `stackgate policies --output
/// admission-policies` generates for it, bound to the namespaces the webhooks see; the
/// webhook-free mode renders no webhook configuration.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn admission_policies_render_where_served_and_match_the_generator() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use stackgate::admission_policies::{KubeVersion, generate};

    let renders = load_renders();
    let policy_kinds = [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ];
    let generated = generate(&stackgate::policy::PolicySet::embedded().unwrap());
    let of_kinds = |r: &Render, kinds: &[&str]| -> Vec<Value> {
        r.docs
            .iter()
            .filter(|d| kinds.contains(&d["kind"].as_str().unwrap_or_default()))
            .cloned()
            .collect()
    };
    // Off by default.
    assert!(of_kinds(render(&renders, "default"), &policy_kinds).is_empty());
    // 1.29 serves no v1, and v1beta1 is off by default there.
    assert!(of_kinds(render(&renders, "admission-policies-1.29"), &policy_kinds).is_empty());

    for (name, version, mutating_api) in [
        ("admission-policies-1.30", "1.30", None),
        (
            "admission-policies-1.34-beta",
            "1.34",
            Some("admissionregistration.k8s.io/v1beta1"),
        ),
        (
            "admission-policies-1.36",
            "1.36",
            Some("admissionregistration.k8s.io/v1"),
        ),
        (
            "webhook-free",
            "1.36",
            Some("admissionregistration.k8s.io/v1"),
        ),
    ] {
        let r = render(&renders, name);
        let rendered = of_kinds(r, &policy_kinds);
        let version: KubeVersion = version.parse().unwrap();
        let mut expected = generated.objects(version).unwrap();
        if mutating_api.is_none() {
            expected.retain(|o| !o["kind"].as_str().unwrap().starts_with("Mutating"));
        }
        assert_eq!(rendered.len(), expected.len(), "{name}");
        // Helm orders documents by kind; pair them by kind and name.
        for got in &rendered {
            let want = expected
                .iter()
                .find(|w| {
                    w["kind"] == got["kind"] && w["metadata"]["name"] == got["metadata"]["name"]
                })
                .unwrap_or_else(|| {
                    panic!(
                        "{name}: unexpected {} {}",
                        got["kind"], got["metadata"]["name"]
                    )
                });
            let kind = got["kind"].as_str().unwrap();
            let what = format!("{name}: {kind} {}", got["metadata"]["name"]);
            assert_eq!(got["kind"], want["kind"], "{what}");
            assert_eq!(got["metadata"]["name"], want["metadata"]["name"], "{what}");
            let api = got["apiVersion"].as_str().unwrap();
            if kind.starts_with("Mutating") {
                assert_eq!(Some(api), mutating_api, "{what}");
            } else {
                assert_eq!(api, "admissionregistration.k8s.io/v1", "{what}");
            }
            assert_eq!(
                got["metadata"]["labels"]["app.kubernetes.io/instance"], r.release,
                "{what}"
            );
            assert!(
                got["metadata"]["namespace"].is_null(),
                "{what}: cluster-scoped"
            );
            if kind.ends_with("Binding") {
                // Bound to what the webhooks see: never the release namespace, nor sandbox
                // (webhooks.excludeNamespaces in the values), nor an exempted namespace.
                let selector: LabelSelector = serde_json::from_value(
                    got["spec"]["matchResources"]["namespaceSelector"].clone(),
                )
                .unwrap();
                let excluded = |ns: &str| {
                    selector.match_expressions.iter().flatten().any(|e| {
                        e.key == "kubernetes.io/metadata.name"
                            && e.operator == "NotIn"
                            && e.values.iter().flatten().any(|v| v == ns)
                    })
                };
                assert!(
                    excluded(&r.namespace),
                    "{what}: binds the release namespace"
                );
                if name != "webhook-free" {
                    assert!(excluded("sandbox"), "{what}: binds an excluded namespace");
                }
                assert!(
                    !excluded("kube-system") && ns_admitted(&selector, "kube-system"),
                    "{what}"
                );
                assert!(
                    selector
                        .match_expressions
                        .iter()
                        .flatten()
                        .any(|e| { e.key == "stackgate.dev/ignore" && e.operator == "NotIn" }),
                    "{what}: exempted namespaces are bound"
                );
                let mut got_spec = got["spec"].clone();
                let mut want_spec = want["spec"].clone();
                got_spec.as_object_mut().unwrap().remove("matchResources");
                want_spec.as_object_mut().unwrap().remove("matchResources");
                assert_eq!(got_spec, want_spec, "{what}");
            } else {
                assert_eq!(got["spec"], want["spec"], "{what}");
            }
            match kind {
                "ValidatingAdmissionPolicy" => roundtrip::<ValidatingAdmissionPolicy>(name, got),
                "ValidatingAdmissionPolicyBinding" => {
                    roundtrip::<ValidatingAdmissionPolicyBinding>(name, got)
                }
                _ => {}
            }
        }
    }

    // Webhook-free: the policies and no webhook configuration.
    let free = render(&renders, "webhook-free");
    assert!(
        of_kinds(
            free,
            &[
                "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration"
            ]
        )
        .is_empty()
    );
    assert!(!of_kinds(free, &["ValidatingAdmissionPolicy"]).is_empty());
}

/// Issue 35: the chart renders admission policies only for what the webhook configuration it
/// renders would check. With `cloudConfig.enabled: false` no ConfigMap policy is rendered, and
/// with `webhooks.mutating.enabled: false` no MutatingAdmissionPolicy: only the chart-values
/// ValidatingAdmissionPolicies and their bindings remain.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn admission_policies_follow_the_family_and_direction_switches() {
    let renders = load_renders();
    let r = render(&renders, "admission-policies-switched");
    let names: Vec<(String, String)> = r
        .docs
        .iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.contains("AdmissionPolicy"))
        })
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_owned(),
                d["metadata"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(!names.is_empty(), "the chart-values policies are rendered");
    for (kind, name) in &names {
        assert!(kind.starts_with("Validating"), "{kind} {name}");
        assert!(name.ends_with("-chart-values"), "{kind} {name}");
    }
    // The switched-off family renders no webhook either (the same switch).
    assert!(
        !r.docs
            .iter()
            .any(|d| d["kind"] == "MutatingWebhookConfiguration"),
        "webhooks.mutating.enabled: false"
    );
}

/// The object a render's Deployment asks `serve` to watch for `fact`, from its environment
/// (`STACKGATE_CLOUD_CONFIG_OBJECT`, `STACKGATE_OPENSHIFT_PLATFORM=auto`), or None when the
/// render does not feed the fact.
fn watched_by(c: &Container, fact: stackgate::facts::FactId) -> Option<stackgate::facts::Watch> {
    use stackgate::facts::{FactId, cloud_config, platform};
    match fact {
        FactId::CloudConfig => {
            let object = env_value(c, "STACKGATE_CLOUD_CONFIG_OBJECT")?;
            let key = env_value(c, "STACKGATE_CLOUD_CONFIG_KEY")
                .unwrap_or_else(|| cloud_config::DEFAULT_KEY.to_owned());
            let object = cloud_config::ConfigObject::parse(&object, &key)
                .unwrap_or_else(|e| panic!("STACKGATE_CLOUD_CONFIG_OBJECT: {e}"));
            Some(object.watch())
        }
        FactId::Platform => (env_value(c, "STACKGATE_OPENSHIFT_PLATFORM").as_deref()
            == Some("auto"))
        .then(platform::watch),
        // Per review, or every object of its resources (`watches_all`).
        FactId::ControlPlaneLoadBalancer | FactId::CcmConfigSource => None,
    }
}

/// Whether a render's Deployment asks `serve` to watch every object of `fact`'s resources
/// (`STACKGATE_CCM_CONFIG_SOURCE=auto`).
fn watches_all(c: &Container, fact: stackgate::facts::FactId) -> bool {
    use stackgate::facts::FactId;
    match fact {
        FactId::CcmConfigSource => {
            env_value(c, "STACKGATE_CCM_CONFIG_SOURCE").as_deref() == Some("auto")
        }
        FactId::CloudConfig | FactId::Platform | FactId::ControlPlaneLoadBalancer => false,
    }
}

/// Every fact an enabled default policy needs (`PolicySet::needed_facts`) that a render's
/// `serve` watches is readable by its ServiceAccount: a Role in the object's namespace (a
/// ClusterRole for a cluster-scoped object), bound to the ServiceAccount, grants get, list and
/// watch on the resource the fact describes, for its object's name. Otherwise the watcher only
/// logs refusals and the family warns that it cannot see the fact.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn rbac_grants_every_watched_fact_an_enabled_default_policy_needs() {
    use stackgate::facts::{FactId, Feed};
    let renders = load_renders();
    let needed = stackgate::policy::PolicySet::embedded()
        .expect("embedded policies")
        .needed_facts();
    let watched_facts: Vec<FactId> = needed
        .iter()
        .copied()
        .filter(|fact| matches!(fact.feed(), Feed::Watched(_)))
        .collect();
    assert!(
        watched_facts.contains(&FactId::CloudConfig) && watched_facts.contains(&FactId::Platform),
        "{watched_facts:?}"
    );
    let watched_all: Vec<FactId> = needed
        .iter()
        .copied()
        .filter(|fact| matches!(fact.feed(), Feed::WatchedAll(_)))
        .collect();
    assert_eq!(watched_all, [FactId::CcmConfigSource]);
    let mut exercised = BTreeSet::new();
    let mut exercised_all = BTreeSet::new();
    for r in &renders {
        let Some(deployment) = r.maybe_one::<Deployment>("Deployment") else {
            continue;
        };
        let pod = deployment
            .spec
            .and_then(|s| s.template.spec)
            .expect("pod spec");
        let c = &pod.containers[0];
        let sa = pod
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let bound = |kind: &str, name: &str, namespace: Option<&str>| {
            let subject_ok = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
                subjects.iter().flatten().any(|s| {
                    s.kind == "ServiceAccount"
                        && s.name == sa
                        && s.namespace.as_deref() == Some(r.namespace.as_str())
                })
            };
            match namespace {
                None => r
                    .typed::<ClusterRoleBinding>("ClusterRoleBinding")
                    .iter()
                    .any(|b| {
                        b.role_ref.kind == kind
                            && b.role_ref.name == name
                            && subject_ok(&b.subjects)
                    }),
                Some(ns) => r.typed::<RoleBinding>("RoleBinding").iter().any(|b| {
                    b.metadata.namespace.as_deref() == Some(ns)
                        && b.role_ref.kind == kind
                        && b.role_ref.name == name
                        && subject_ok(&b.subjects)
                }),
            }
        };
        for fact in &watched_facts {
            let Some(watch) = watched_by(c, *fact) else {
                continue;
            };
            let Feed::Watched(resources) = fact.feed() else {
                unreachable!("filtered above");
            };
            assert!(
                resources.contains(&watch.resource),
                "{}: {fact} watches {:?}, which the fact does not describe",
                r.name,
                watch.resource
            );
            exercised.insert(*fact);
            let grants = |rule: &PolicyRule| {
                let verbs: BTreeSet<&str> = rule.verbs.iter().map(String::as_str).collect();
                rule.api_groups
                    .iter()
                    .flatten()
                    .any(|g| g == watch.resource.group)
                    && rule
                        .resources
                        .iter()
                        .flatten()
                        .any(|res| res == watch.resource.plural)
                    && rule
                        .resource_names
                        .as_ref()
                        .is_none_or(|names| names.contains(&watch.name))
                    && ["get", "list", "watch"].iter().all(|v| verbs.contains(v))
            };
            let granted = match &watch.namespace {
                None => r
                    .typed::<ClusterRole>("ClusterRole")
                    .into_iter()
                    .filter(|role| role.rules.iter().flatten().any(grants))
                    .any(|role| {
                        bound(
                            "ClusterRole",
                            role.metadata.name.as_deref().unwrap_or(""),
                            None,
                        )
                    }),
                Some(ns) => r
                    .typed::<Role>("Role")
                    .into_iter()
                    .filter(|role| role.metadata.namespace.as_deref() == Some(ns.as_str()))
                    .filter(|role| role.rules.iter().flatten().any(grants))
                    .any(|role| {
                        bound(
                            "Role",
                            role.metadata.name.as_deref().unwrap_or(""),
                            Some(ns),
                        )
                    }),
            };
            assert!(
                granted,
                "{}: the {fact} fact watches {} {}/{} {:?}, but no Role bound to the \
                 ServiceAccount {sa} grants get, list and watch on it",
                r.name, watch.resource.plural, watch.resource.group, watch.name, watch.namespace
            );
        }
        // A fact over every object of its resources: a bound ClusterRole grants list and
        // watch on each, cluster-wide, without resourceNames (a list with resourceNames would
        // be refused: the objects are not selected by name).
        for fact in &watched_all {
            if !watches_all(c, *fact) {
                continue;
            }
            let Feed::WatchedAll(resources) = fact.feed() else {
                unreachable!("filtered above");
            };
            exercised_all.insert(*fact);
            for resource in resources {
                let grants = |rule: &PolicyRule| {
                    let verbs: BTreeSet<&str> = rule.verbs.iter().map(String::as_str).collect();
                    rule.api_groups
                        .iter()
                        .flatten()
                        .any(|g| g == resource.group)
                        && rule
                            .resources
                            .iter()
                            .flatten()
                            .any(|res| res == resource.plural)
                        && rule.resource_names.as_ref().is_none_or(Vec::is_empty)
                        && ["list", "watch"].iter().all(|v| verbs.contains(v))
                };
                let granted = r
                    .typed::<ClusterRole>("ClusterRole")
                    .into_iter()
                    .filter(|role| role.rules.iter().flatten().any(grants))
                    .any(|role| {
                        bound(
                            "ClusterRole",
                            role.metadata.name.as_deref().unwrap_or(""),
                            None,
                        )
                    });
                assert!(
                    granted,
                    "{}: the {fact} fact lists and watches every {}.{}, but no ClusterRole \
                     bound to the ServiceAccount {sa} grants list and watch on them",
                    r.name, resource.plural, resource.group
                );
            }
        }
    }
    assert_eq!(
        exercised_all.into_iter().collect::<Vec<_>>(),
        watched_all,
        "a fact over every object of a resource that no render feeds"
    );
    // Not vacuous: some render feeds each watched fact.
    assert_eq!(
        exercised.into_iter().collect::<Vec<_>>(),
        watched_facts,
        "a watched fact no render feeds"
    );
}

/// The pre-delete hook (`stackgate uninstall`): runs after its ServiceAccount and RBAC exist,
/// with the release's own names on its command line (which the binary parses), deletes only
/// objects its RBAC names, removes the report CRDs only where the chart installs them, and
/// runs as locked down as the server, outside the Deployment's selector.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn uninstall_hook_removes_webhooks_first_with_rbac_naming_each_object() {
    use clap::Parser as _;
    use stackgate::cli::{Cli, Command};

    let renders = load_renders();
    for r in &renders {
        let n = &r.name;
        let jobs = r.uninstall_hook::<Job>("Job");
        assert_eq!(jobs.len(), 1, "{n}: one uninstall Job");
        let job = &jobs[0];
        let weight = |meta: &ObjectMeta| -> i32 {
            let a = meta.annotations.clone().unwrap_or_default();
            assert_eq!(
                a.get("helm.sh/hook").map(String::as_str),
                Some("pre-delete"),
                "{n}: {:?}",
                meta.name
            );
            assert_eq!(
                a.get("helm.sh/hook-delete-policy").map(String::as_str),
                Some("before-hook-creation,hook-succeeded"),
                "{n}: {:?}",
                meta.name
            );
            a.get("helm.sh/hook-weight")
                .and_then(|w| w.parse().ok())
                .unwrap_or_else(|| panic!("{n}: {:?} has no hook weight", meta.name))
        };
        let job_weight = weight(&job.metadata);
        let sa = r.uninstall_hook::<ServiceAccount>("ServiceAccount");
        let cluster_roles = r.uninstall_hook::<ClusterRole>("ClusterRole");
        let roles = r.uninstall_hook::<Role>("Role");
        let bindings = r.uninstall_hook::<ClusterRoleBinding>("ClusterRoleBinding");
        let role_bindings = r.uninstall_hook::<RoleBinding>("RoleBinding");
        assert_eq!(
            (
                sa.len(),
                cluster_roles.len(),
                roles.len(),
                bindings.len(),
                role_bindings.len()
            ),
            (1, 1, 1, 1, 1),
            "{n}: hook ServiceAccount and RBAC"
        );
        for meta in [
            &sa[0].metadata,
            &cluster_roles[0].metadata,
            &roles[0].metadata,
            &bindings[0].metadata,
            &role_bindings[0].metadata,
        ] {
            assert!(
                weight(meta) < job_weight,
                "{n}: {:?} must exist before the Job",
                meta.name
            );
        }
        let sa_name = sa[0].metadata.name.clone().expect("name");
        for subjects in [&bindings[0].subjects, &role_bindings[0].subjects] {
            let subjects = subjects.clone().unwrap_or_default();
            assert_eq!(subjects.len(), 1, "{n}");
            assert_eq!(subjects[0].name, sa_name, "{n}");
            assert_eq!(subjects[0].namespace.as_deref(), Some(r.namespace.as_str()));
        }

        // The command line: the binary parses it, and it names this release's objects.
        let pod = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .expect("pod spec");
        assert_eq!(pod.service_account_name.as_deref(), Some(sa_name.as_str()));
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"), "{n}");
        let c = &pod.containers[0];
        let mut argv = vec!["stackgate".to_owned()];
        argv.extend(c.args.clone().unwrap_or_default());
        let cli = Cli::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("{n}: the hook's command line does not parse: {e}"));
        let Command::Uninstall(args) = cli.command else {
            panic!("{n}: the hook does not run `stackgate uninstall`: {argv:?}")
        };
        let deployment = r.one::<Deployment>("Deployment");
        let fullname = deployment.metadata.name.clone().expect("name");
        for kind in [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ] {
            for doc in r.of_kind(kind) {
                assert_eq!(
                    doc["metadata"]["name"].as_str(),
                    Some(args.webhook_configuration.as_str()),
                    "{n}: the hook deletes another {kind} than the chart's"
                );
            }
        }
        assert_eq!(args.webhook_configuration, fullname, "{n}");
        assert_eq!(args.release, r.release, "{n}");
        assert_eq!(args.namespace, r.namespace, "{n}");
        let dc = &deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .expect("pod spec")
            .containers[0];
        if let Some(lease) = dc
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "STACKGATE_BACKGROUND_AUDIT_LEASE_NAME")
        {
            assert_eq!(
                lease.value.as_deref(),
                Some(args.lease_name.as_str()),
                "{n}"
            );
        }
        // The report CRDs; the StackgateException CRD is kept (the platform team's records).
        let installs_crds = r
            .of_kind("CustomResourceDefinition")
            .iter()
            .any(|crd| crd["spec"]["group"] == "wgpolicyk8s.io");
        assert_eq!(
            args.crds, installs_crds,
            "{n}: --crds where the chart installs the CRDs"
        );
        assert_eq!(c.image, dc.image, "{n}: the hook runs the server's image");

        // Locked down like the server; outside the Deployment's (PDB's, Service's) selector.
        let sc = c.security_context.clone().expect("securityContext");
        assert_eq!(sc.read_only_root_filesystem, Some(true), "{n}");
        assert_eq!(sc.allow_privilege_escalation, Some(false), "{n}");
        assert_eq!(sc.run_as_non_root, Some(true), "{n}");
        let selector = deployment
            .spec
            .as_ref()
            .and_then(|s| s.selector.match_labels.clone())
            .unwrap_or_default();
        let pod_labels = job
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        assert!(
            !selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
            "{n}: the hook pod matches the Deployment's selector"
        );
        assert!(
            job.spec
                .as_ref()
                .and_then(|s| s.active_deadline_seconds)
                .is_some(),
            "{n}: a hook that cannot run must not hang helm uninstall"
        );

        // RBAC: deletes only by name; lists only report kinds (to find stackgate's and to see
        // whether another tool's report is left); nothing else.
        let mut deletable: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for rule in cluster_roles[0]
            .rules
            .iter()
            .flatten()
            .chain(roles[0].rules.iter().flatten())
        {
            for verb in &rule.verbs {
                for res in rule.resources.iter().flatten() {
                    match verb.as_str() {
                        "delete" | "get" => {
                            let names = rule.resource_names.clone().unwrap_or_default();
                            assert!(!names.is_empty(), "{n}: {verb} {res} without resourceNames");
                            if verb == "delete" {
                                deletable.entry(res.clone()).or_default().extend(names);
                            }
                        }
                        "list" => assert!(
                            matches!(
                                res.as_str(),
                                "policyreports"
                                    | "clusterpolicyreports"
                                    | "reports"
                                    | "clusterreports"
                            ),
                            "{n}: list on {res}"
                        ),
                        other => panic!("{n}: verb {other} on {res}"),
                    }
                }
            }
        }
        let one = |v: &str| vec![v.to_owned()];
        assert_eq!(
            deletable.remove("validatingwebhookconfigurations"),
            Some(one(&fullname))
        );
        assert_eq!(
            deletable.remove("mutatingwebhookconfigurations"),
            Some(one(&fullname))
        );
        assert_eq!(
            deletable.remove("leases"),
            Some(one(&args.lease_name)),
            "{n}"
        );
        for res in [
            "policyreports",
            "clusterpolicyreports",
            "reports",
            "clusterreports",
        ] {
            assert_eq!(deletable.remove(res), Some(one("stackgate")), "{n}: {res}");
        }
        let crds = deletable.remove("customresourcedefinitions");
        if installs_crds {
            let mut names = crds.expect("CRD delete rule");
            names.sort();
            let mut installed: Vec<String> = r
                .of_kind("CustomResourceDefinition")
                .iter()
                .filter(|d| d["spec"]["group"] == "wgpolicyk8s.io")
                .map(|d| {
                    d["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect();
            installed.sort();
            assert_eq!(
                names, installed,
                "{n}: the CRDs the chart installs, by name"
            );
        } else {
            assert_eq!(
                crds, None,
                "{n}: no CRD rights where the chart installs none"
            );
        }
        assert!(deletable.is_empty(), "{n}: deletes more: {deletable:?}");
    }
    // Not vacuous: the CRD case is rendered.
    assert!(
        renders
            .iter()
            .any(|r| !r.of_kind("CustomResourceDefinition").is_empty()),
        "no render installs the report CRDs"
    );
}

/// Whether the render is `tls.mode: selfManaged` (the pods make and rotate the certificate).
fn self_managed(r: &Render) -> bool {
    r.one::<Deployment>("Deployment")
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|p| p.containers.into_iter().next())
        .is_some_and(|c| env_value(&c, "STACKGATE_TLS_MODE").as_deref() == Some("self-managed"))
}

/// `tls.mode: selfManaged` (the default): the render holds no certificate material and no
/// `caBundle` (so two renders are byte-identical, and GitOps tools have no caBundle field to
/// diff: the pods' writes are fields the chart never sets), the Secret is rendered empty, and
/// the pods' RBAC names the one Secret, its Lease and stackgate's own two webhook
/// configurations; every other mode renders none of it.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn self_managed_tls_is_stable_and_named() {
    let renders = load_renders();
    let dir = require_renders();
    // .ci/chart.sh renders the default a second time: byte for byte the same.
    let first = fs::read(dir.join("default.yaml")).expect("default.yaml");
    let second = fs::read(dir.join("default-again.yaml")).expect("default-again.yaml");
    assert!(first == second, "two renders of the default differ");
    let mut checked = 0;
    for r in &renders {
        let fullname = r.one::<Service>("Service").metadata.name.expect("name");
        let tls_name = format!("{fullname}-certs");
        let roles: Vec<Role> = r
            .typed::<Role>("Role")
            .into_iter()
            .filter(|x| x.metadata.name.as_deref() == Some(tls_name.as_str()))
            .collect();
        let cluster_roles: Vec<ClusterRole> = r
            .typed::<ClusterRole>("ClusterRole")
            .into_iter()
            .filter(|x| x.metadata.name.as_deref() == Some(tls_name.as_str()))
            .collect();
        if !self_managed(r) {
            assert!(roles.is_empty() && cluster_roles.is_empty(), "{}", r.name);
            continue;
        }
        checked += 1;
        let text = fs::read_to_string(dir.join(format!("{}.yaml", r.name))).expect("render");
        for material in ["BEGIN CERTIFICATE", "PRIVATE KEY", "caBundle:", "tls.crt:"] {
            assert!(
                !text.contains(material),
                "{}: {material} in the render",
                r.name
            );
        }
        let secret = r.secret(&tls_name).expect("the empty Secret");
        assert_eq!(secret.type_.as_deref(), Some("Opaque"), "{}", r.name);
        assert!(
            secret.data.is_none() && secret.string_data.is_none(),
            "{}: the Secret is rendered empty",
            r.name
        );
        let mut configurations = 0;
        for meta in r
            .typed::<MutatingWebhookConfiguration>("MutatingWebhookConfiguration")
            .into_iter()
            .map(|c| c.metadata)
            .chain(
                r.typed::<ValidatingWebhookConfiguration>("ValidatingWebhookConfiguration")
                    .into_iter()
                    .map(|c| c.metadata),
            )
        {
            configurations += 1;
            assert_eq!(meta.name.as_deref(), Some(fullname.as_str()), "{}", r.name);
            let labels = meta.labels.unwrap_or_default();
            assert_eq!(
                labels.get("app.kubernetes.io/part-of").map(String::as_str),
                Some("stackgate"),
                "{}: the label the pods check before writing caBundle",
                r.name
            );
            let annotations = meta.annotations.unwrap_or_default();
            assert_eq!(
                annotations.get("stackgate.dev/ca-bundle-from"),
                Some(&format!("{}/{tls_name}", r.namespace)),
                "{}",
                r.name
            );
        }
        // webhook-free renders none; the others both or one.
        assert!(configurations <= 2, "{}", r.name);

        let rule = |rules: &Option<Vec<PolicyRule>>, group: &str, resource: &str| {
            rules
                .iter()
                .flatten()
                .filter(|x| {
                    x.api_groups.iter().flatten().any(|g| g == group)
                        && x.resources.iter().flatten().any(|res| res == resource)
                })
                .map(|x| {
                    (
                        x.resource_names.clone(),
                        x.verbs.iter().cloned().collect::<BTreeSet<_>>(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        let [role] = roles.as_slice() else {
            panic!("{}: one Role {tls_name}", r.name)
        };
        assert_eq!(
            role.metadata.namespace.as_deref(),
            Some(r.namespace.as_str())
        );
        assert_eq!(
            rule(&role.rules, "", "secrets"),
            [(
                Some(vec![tls_name.clone()]),
                set(&["get", "list", "watch", "update", "patch"])
            )],
            "{}: the one Secret, never create",
            r.name
        );
        assert_eq!(
            rule(&role.rules, "coordination.k8s.io", "leases"),
            [
                (Some(vec![tls_name.clone()]), set(&["get", "update"])),
                (None, set(&["create"]))
            ],
            "{}: the Lease",
            r.name
        );
        assert_eq!(role.rules.as_ref().map(Vec::len), Some(3), "{}", r.name);
        let [cluster_role] = cluster_roles.as_slice() else {
            panic!("{}: one ClusterRole {tls_name}", r.name)
        };
        let want = [(Some(vec![fullname.clone()]), set(&["get", "update"]))];
        for resource in [
            "mutatingwebhookconfigurations",
            "validatingwebhookconfigurations",
        ] {
            assert_eq!(
                rule(
                    &cluster_role.rules,
                    "admissionregistration.k8s.io",
                    resource
                ),
                want,
                "{}: {resource} by name",
                r.name
            );
        }
        assert_eq!(
            cluster_role.rules.as_ref().map(Vec::len),
            Some(1),
            "{}",
            r.name
        );
    }
    assert!(checked >= 10, "only {checked} self-managed renders");
}

/// `items` without the self-managed certificate's roles (`<fullname>-certs`), which
/// `self_managed_tls_is_stable_and_named` checks.
fn not_tls<T: k8s_openapi::Metadata<Ty = ObjectMeta>>(items: Vec<T>) -> Vec<T> {
    items
        .into_iter()
        .filter(|x| {
            !x.metadata()
                .name
                .as_deref()
                .unwrap_or_default()
                .ends_with("-certs")
        })
        .collect()
}

/// Every data value of every ConfigMap in the test fixtures' YAML files.
fn fixture_configmap_values() -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = e.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
                continue;
            }
            let Ok(text) = fs::read_to_string(&path) else {
                continue;
            };
            // YAML files hold objects; JSON files hold objects or AdmissionReviews.
            let objects: Vec<Value> = match path.extension().and_then(|x| x.to_str()) {
                Some("yaml" | "yml") => stackgate::yaml::parse_stream(&text)
                    .into_iter()
                    .flatten()
                    .filter_map(|doc| doc.root.to_json().ok())
                    .collect(),
                Some("json") => serde_json::from_str::<Value>(&text)
                    .map(|v| {
                        vec![
                            v["request"]["object"].clone(),
                            v["request"]["oldObject"].clone(),
                            v,
                        ]
                    })
                    .unwrap_or_default(),
                _ => continue,
            };
            for v in objects.iter().filter(|v| v["kind"] == "ConfigMap") {
                for value in v["data"].as_object().into_iter().flatten().map(|(_, v)| v) {
                    out.extend(value.as_str().map(str::to_owned));
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo().join("tests/fixtures"), &mut out);
    out
}

/// Issue 33, item 5: ClusterResourceSet payload ConfigMaps carry no marker, so the chart's
/// `crs-payload-configmaps` webhooks send a ConfigMap by its data. The condition must never be
/// narrower than the engine's payload reader (`sites::payload::worth_parsing`): every value it
/// would parse is sent, whatever spelling (YAML escapes) names the site; and it must keep out
/// what the reader ignores, or every manifest ConfigMap of a cluster would be sent. Evaluated
/// with a CEL interpreter over the fixtures' ConfigMaps and hostile spellings;
/// `tests/real_apiserver_crs.rs` runs the same webhooks on a real kube-apiserver.
#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn payload_configmap_condition_sends_everything_the_payload_reader_parses() {
    use stackgate::policy::PolicySet;
    use stackgate::sites::payload::{CCM_MARKERS, worth_parsing};

    let sites = PolicySet::embedded().expect("embedded policies").sites;
    let renders = load_renders();
    let default = render(&renders, "default");
    let mut conditions = Vec::new();
    for config in default.of_kind("ValidatingWebhookConfiguration") {
        for w in config["webhooks"].as_array().into_iter().flatten() {
            if w["name"] == "crs-payload-configmaps.validate.stackgate.dev" {
                for c in w["matchConditions"].as_array().into_iter().flatten() {
                    if c["name"] == "may-embed-a-site" {
                        conditions.push(c["expression"].as_str().unwrap().to_owned());
                    }
                }
            }
        }
    }
    let [condition] = conditions.as_slice() else {
        panic!("one may-embed-a-site condition in the default render: {conditions:?}");
    };
    let label = sites.label.clone().expect("the default sites have a label");
    // The condition tests each thing the reader looks for (each site, the site label, each
    // marker) by a token it contains, of at most 10 characters (the apiserver charges a
    // `contains` by the token's length in tens), and at most 6 of them.
    let tokens: Vec<&str> = condition
        .split("contains('")
        .skip(1)
        .filter_map(|rest| rest.split_once("')").map(|(token, _)| token))
        .filter(|t| !matches!(*t, "kind" | "\\\\"))
        .collect();
    assert!(
        (1..=6).contains(&tokens.len()) && tokens.iter().all(|t| t.len() <= 10),
        "{tokens:?}"
    );
    for name in sites
        .sites
        .iter()
        .map(|s| s.name.as_str())
        .chain([label.as_str()])
        .chain(CCM_MARKERS.iter().copied())
    {
        assert!(
            tokens.iter().any(|t| name.contains(t)),
            "{name} holds none of the condition's tokens {tokens:?}"
        );
    }

    let env = Arc::new({
        let mut env = cel::Env::stdlib();
        env.add_extension(cel::extensions::strings).unwrap();
        env
    });
    let program = env.compile(condition).expect("the condition parses");
    let sends = |value: &str| -> bool {
        let mut ctx = cel::Context::with_env(Arc::clone(&env));
        ctx.add_variable("object", serde_json::json!({"data": {"v": value}}))
            .unwrap();
        program.execute(&ctx).expect("evaluates") == cel::Value::Bool(true)
    };

    let site = &sites.sites[0].name;
    let escaped_x: String = site
        .chars()
        .map(|c| format!("\\x{:02x}", c as u32))
        .collect();
    let escaped_u: String = site
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let folded = format!("{}\\\n      {}", &site[..2], &site[2..]);
    let mut values = fixture_configmap_values();
    let fixtures = values.len();
    for name in [site.clone(), escaped_x, escaped_u, folded, label.clone()] {
        for kind in ["kind", "\\x6bind", "ki\\\n  nd"] {
            values.push(format!(
                "apiVersion: v1\n{kind}: Secret\nmetadata:\n  name: \"{name}\"\n  namespace: kube-system\n"
            ));
        }
    }
    for marker in CCM_MARKERS {
        values.push(format!(
            "kind: DaemonSet\nspec:\n  template:\n    spec:\n      containers:\n      - args: [\"{marker}\"]\n"
        ));
    }
    // ConfigMaps every cluster has, which must stay out.
    values.extend(
        [
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n",
            ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa\n}\n",
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: calico-node\n",
            "{\"kind\": \"Dashboard\", \"title\": \"nodes\"}",
        ]
        .map(str::to_owned),
    );
    let (mut parsed, mut ignored) = (0, 0);
    for value in &values {
        if worth_parsing(value, &sites) {
            parsed += 1;
            assert!(
                sends(value),
                "the reader parses it, the chart does not send it:\n{value}"
            );
        } else if !sends(value) {
            ignored += 1;
        }
    }
    eprintln!(
        "{} values ({fixtures} from fixtures): {parsed} parsed by the reader, all sent; \
         {ignored} kept out",
        values.len()
    );
    assert!(fixtures >= 10, "only {fixtures} fixture ConfigMap values");
    assert!(parsed >= 20, "only {parsed} values the reader parses");
    // What the reader ignores mostly stays out: plain ConfigMaps, fixtures and the above.
    assert!(ignored >= 6, "only {ignored} values kept out");
    assert!(!sends(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: calico-node\n"
    ));
    assert!(!sends("[Global]\nauth-url = https://keystone:5000/v3\n"));
}
