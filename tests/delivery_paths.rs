//! Delivery paths that were read wrongly or not at all (issue 23): each case goes through the
//! webhook (`/validate` and `/mutate`, in process) and through `stackgate check`, and both
//! faces must say the same thing.
//!
//! - ClusterResourceSet payloads whose names are spelled with YAML or JSON escapes or a folded
//!   line are parsed (the prefilter reads escapes);
//! - a payload whose `cloud.conf` is a clusterctl variable is said to be unseen.

#[path = "support/review.rs"]
mod review;

use std::path::Path;

use base64::Engine as _;
use clap::Parser;
use serde_json::{Value, json};
use stackgate::admission::{self, Webhook};
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::report::{Item, ItemKind, Report};

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn options(paths: &[&Path], extra: &[&str]) -> CheckOptions {
    let mut argv = vec!["check".to_owned()];
    argv.extend(paths.iter().map(|p| p.display().to_string()));
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args)
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn webhook(engine: &Engine, which: Webhook, object: &Value) -> Value {
    let body = review::review_for(object, "delivery");
    let reply = admission::handle(
        engine,
        which,
        &serde_json::to_vec(&body).expect("encode"),
        &Metrics::new(),
    );
    assert_eq!(reply.status, 200);
    serde_json::from_slice::<Value>(&reply.body).expect("review")["response"].clone()
}

/// `check` over one file holding `text` (named `name`): every item of every object, as
/// `(kind, message)`.
fn check_file(name: &str, text: &str, extra: &[&str]) -> (Report, Vec<(ItemKind, String)>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    let report = check::check(&options(&[&path], extra), &engine(), &mut std::io::empty())
        .expect("check runs");
    let items = report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .map(|i| (i.kind, i.message.clone()))
        .collect();
    (report, items)
}

/// A ClusterResourceSet payload Secret embedding `inner` (YAML text) in `stringData`.
fn crs_secret(inner: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "crs", "namespace": "default"},
        "type": "addons.cluster.x-k8s.io/resource-set",
        "stringData": {"cloud-config.yaml": inner}})
}

/// The same Secret as the apiserver hands it to admission: base64 `data`.
fn as_admitted(secret: &Value) -> Value {
    let mut secret = secret.clone();
    let text = secret["stringData"]["cloud-config.yaml"]
        .as_str()
        .expect("payload")
        .to_owned();
    secret.as_object_mut().expect("object").remove("stringData");
    secret["data"] = json!({
        "cloud-config.yaml": base64::engine::general_purpose::STANDARD.encode(text)
    });
    secret
}

/// A ConfigMap payload (found by shape) embedding `inner`.
fn crs_configmap(inner: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "crs", "namespace": "default"},
        "data": {"cloud-config.yaml": inner}})
}

/// The embedded Secret's config: OVN without lb-method and no serial line (denied, and
/// patched with the serial line).
const CONF: &str = "[Global]\\nregion = RegionOne\\n[LoadBalancer]\\nlb-provider = ovn\\n";

/// Spellings of the embedded `kube-system/cloud-config` Secret that name `kind` or the name
/// through escapes or a folded line.
fn spellings() -> Vec<(&'static str, String)> {
    vec![
        (
            "YAML \\x6b in a key",
            format!(
                "apiVersion: v1\n\"\\x6bind\": Secret\nmetadata:\n  name: cloud-config\n  \
                 namespace: kube-system\nstringData:\n  cloud.conf: \"{CONF}\"\n"
            ),
        ),
        (
            "JSON \\u002d in the name",
            format!(
                "{{\"apiVersion\": \"v1\", \"kind\": \"Secret\", \"metadata\": {{\"name\": \
                 \"cloud\\u002dconfig\", \"namespace\": \"kube-system\"}}, \"stringData\": \
                 {{\"cloud.conf\": \"{CONF}\"}}}}\n"
            ),
        ),
        (
            "a folded line in the name",
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: \"cloud-\\\n    config\"\n  \
                 namespace: kube-system\nstringData:\n  cloud.conf: \"{CONF}\"\n"
            ),
        ),
    ]
}

#[test]
fn escaped_payloads_are_read_by_the_webhook_and_check() {
    let engine = engine();
    for (what, inner) in spellings() {
        for object in [
            crs_secret(&inner),
            as_admitted(&crs_secret(&inner)),
            crs_configmap(&inner),
        ] {
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let v = webhook(&engine, Webhook::Validate, &object);
            assert_eq!(v["allowed"], false, "{what} ({kind}): {v}");
            let message = v["status"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("ClusterResourceSet payload"),
                "{what}: {message}"
            );
            let m = webhook(&engine, Webhook::Mutate, &object);
            assert!(m["patch"].is_string(), "{what} ({kind}): no patch: {m}");
        }
        // `check` over the same payload written in a file.
        let file = format!(
            "{}\n",
            serde_json::to_string(&crs_secret(&inner)).expect("json")
        );
        let (_, items) = check_file("crs.json", &file, &[]);
        assert!(
            items
                .iter()
                .any(|(k, m)| *k == ItemKind::Denial && m.contains("ClusterResourceSet payload")),
            "{what}: {items:?}"
        );
        assert!(
            items.iter().any(|(k, _)| *k == ItemKind::Mutation),
            "{what}: {items:?}"
        );
    }
}

#[test]
fn the_plain_spelling_is_still_found_and_other_payloads_are_not() {
    let engine = engine();
    let plain = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         stringData:\n  cloud.conf: \"{CONF}\"\n"
    );
    assert_eq!(
        webhook(&engine, Webhook::Validate, &crs_secret(&plain))["allowed"],
        false
    );
    // Escapes that spell another name: parsed, and nothing is found.
    let other = plain.replace("name: cloud-config", "name: \"cloud\\x2dother\"");
    assert_eq!(
        webhook(&engine, Webhook::Validate, &crs_secret(&other))["allowed"],
        true
    );
    assert_eq!(
        webhook(&engine, Webhook::Validate, &crs_configmap(&other))["allowed"],
        true
    );
}

/// cluster-api-provider-openstack's cluster-resource-sets component as it is in Git: the
/// embedded Secret's `cloud.conf` is a clusterctl variable.
const VARIABLE_PAYLOAD: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                                namespace: kube-system\ndata:\n  cloud.conf: \
                                ${OPENSTACK_CLOUD_PROVIDER_CONF_B64}\n";

#[test]
fn a_payload_whose_config_is_a_clusterctl_variable_is_said_to_be_unseen() {
    let engine = engine();
    let secret = crs_secret(VARIABLE_PAYLOAD);
    let v = webhook(&engine, Webhook::Validate, &secret);
    assert_eq!(v["allowed"], true, "{v}");
    let warnings = v["warnings"].to_string();
    // The webhook's warnings are cut short; `check` shows the whole message.
    assert!(
        warnings.contains("cloud-config-integrity")
            && warnings.contains("clusterctl variable ${OPENSTACK_CLOUD_PROVIDER_CONF_B64}"),
        "{warnings}"
    );
    let m = webhook(&engine, Webhook::Mutate, &secret);
    assert!(m["patch"].is_null(), "{m}");
    let (_, items) = check_file(
        "crs.json",
        &serde_json::to_string(&secret).expect("json"),
        &[],
    );
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].0, ItemKind::Warning);
    assert!(
        items[0].1.contains("${OPENSTACK_CLOUD_PROVIDER_CONF_B64}")
            && items[0].1.contains("cannot see"),
        "{items:?}"
    );
}

/// openCenter-style CCM override values encrypted with SOPS before commit (the shape SOPS
/// writes; the ciphertext is made up).
const SOPS_VALUES: &str = "cloudConfig:\n  global:\n    auth-url: ENC[AES256_GCM,data:aGVsbG8=,iv:aXY=,tag:dGFn,type:str]\n    \
                           password: ENC[AES256_GCM,data:c2VjcmV0,iv:aXY=,tag:dGFn,type:str]\n  \
                           loadBalancer:\n    provider-requires-serial-api-calls: ENC[AES256_GCM,data:ZmFsc2U=,iv:aXY=,tag:dGFn,type:bool]\n\
                           sops:\n  age:\n  - recipient: age1example\n    enc: |\n      -----BEGIN AGE ENCRYPTED FILE-----\n      \
                           -----END AGE ENCRYPTED FILE-----\n  lastmodified: \"2025-01-01T00:00:00Z\"\n  \
                           mac: ENC[AES256_GCM,data:bWFj,iv:aXY=,tag:dGFn,type:str]\n  version: 3.9.4\n";

#[test]
fn sops_encrypted_values_are_noted_as_encrypted_never_as_not_set() {
    let (report, items) = check_file(
        "occm-values.yaml",
        SOPS_VALUES,
        &[
            "--values-for",
            "openstack-cloud-controller-manager=*occm-values.yaml",
        ],
    );
    assert!(items.is_empty(), "{items:?}");
    let file = &report.files[0];
    assert!(file.problems.is_empty(), "{:?}", file.problems);
    assert!(
        file.skipped
            .as_deref()
            .is_some_and(|s| s.starts_with("encrypted: not checked")),
        "{:?}",
        file.skipped
    );
    assert_eq!(report.exit_code(), 0);
}

#[test]
fn a_release_reading_a_sops_encrypted_secret_says_its_values_are_unseen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let release = "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  \
                   name: occm\n  namespace: kube-system\nspec:\n  chart:\n    spec:\n      \
                   chart: openstack-cloud-controller-manager\n  valuesFrom:\n  - kind: Secret\n    \
                   name: occm-values\n    valuesKey: values.yaml\n";
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: occm-values\n  \
                  namespace: kube-system\nstringData:\n  values.yaml: ENC[AES256_GCM,data:Y2xvdWQ=,iv:aXY=,tag:dGFn,type:str]\n\
                  sops:\n  mac: ENC[AES256_GCM,data:bWFj,iv:aXY=,tag:dGFn,type:str]\n  version: 3.9.4\n";
    std::fs::write(dir.path().join("release.yaml"), release).expect("write");
    std::fs::write(dir.path().join("secret.enc.yaml"), secret).expect("write");
    let report = check::check(
        &options(&[dir.path()], &[]),
        &engine(),
        &mut std::io::empty(),
    )
    .expect("check runs");
    let encrypted = report
        .files
        .iter()
        .find(|f| f.name.ends_with("secret.enc.yaml"))
        .expect("the Secret's file");
    assert!(
        encrypted
            .skipped
            .as_deref()
            .unwrap_or("")
            .starts_with("encrypted")
    );
    let items: Vec<&Item> = report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .filter(|i| i.rule == "cloud-config-integrity")
        .collect();
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(
        items[0].message.contains("Secret occm-values") && items[0].message.contains("cannot see"),
        "{}",
        items[0].message
    );
}

const UPSTREAM_RENDER: &str = "tests/fixtures/helm-render/occm-2.36.0-serial.yaml";

#[test]
fn helm_template_of_the_upstream_chart_with_serial_set_gives_no_warning() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(UPSTREAM_RENDER);
    let text = std::fs::read_to_string(&path).expect("fixture");
    let engine = engine();
    // The render holds the empty `[BlockStorage]` (shared with cinder-csi).
    let docs = stackgate::yaml::parse_stream(&text).expect("parses");
    let objects: Vec<Value> = docs
        .iter()
        .map(|d| d.root.to_json().expect("json"))
        .filter(|v| v.is_object())
        .collect();
    let secret = objects
        .iter()
        .find(|o| o["kind"] == "Secret")
        .expect("the cloud-config Secret");
    let conf = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["cloud.conf"].as_str().expect("cloud.conf"))
        .expect("base64");
    assert!(String::from_utf8_lossy(&conf).contains("[BlockStorage]"));
    for object in &objects {
        let v = webhook(&engine, Webhook::Validate, object);
        assert_eq!(v["allowed"], true, "{}: {v}", object["kind"]);
        assert!(
            v["warnings"].is_null(),
            "{}: {}",
            object["kind"],
            v["warnings"]
        );
        assert!(webhook(&engine, Webhook::Mutate, object)["patch"].is_null());
    }
    let report =
        check::check(&options(&[&path], &[]), &engine, &mut std::io::empty()).expect("check runs");
    let items: Vec<&Item> = report.files[0]
        .objects
        .iter()
        .flat_map(|o| &o.items)
        .collect();
    assert_eq!(report.files[0].objects.len(), 5);
    assert!(items.is_empty(), "{items:?}");
}

/// A kubeadm static Pod of kube-apiserver 1.25 with the in-tree OpenStack provider (the shape
/// kubeadm writes to /etc/kubernetes/manifests), and the same flags on kube-controller-manager
/// run through hyperkube.
const IN_TREE_APISERVER: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  \
    namespace: kube-system\n  labels:\n    component: kube-apiserver\n    tier: control-plane\n\
    spec:\n  containers:\n  - command:\n    - kube-apiserver\n    - --advertise-address=10.0.0.10\n    \
    - --cloud-provider=openstack\n    - --cloud-config=/etc/kubernetes/cloud.conf\n    \
    image: registry.k8s.io/kube-apiserver:v1.25.16\n    name: kube-apiserver\n  hostNetwork: true\n\
    ---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: kcm\n  namespace: kube-system\n\
    spec:\n  template:\n    spec:\n      containers:\n      - name: kcm\n        \
    image: example.test/hyperkube:v1.20.0\n        command: [\"/hyperkube\", \"kube-controller-manager\"]\n        \
    args: [\"--cloud-provider=openstack\"]\n";

#[test]
fn in_tree_kube_apiserver_and_controller_manager_are_not_taken_for_the_ccm() {
    let engine = engine();
    let docs = stackgate::yaml::parse_stream(IN_TREE_APISERVER).expect("parses");
    for doc in &docs {
        let object = doc.root.to_json().expect("json");
        let v = webhook(&engine, Webhook::Validate, &object);
        assert_eq!(v["allowed"], true, "{v}");
        assert!(v["warnings"].is_null(), "{}", v["warnings"]);
    }
    let (_, items) = check_file("control-plane.yaml", IN_TREE_APISERVER, &[]);
    assert!(items.is_empty(), "{items:?}");
    // The CCM with the same flag is still read (default cluster name).
    let ccm = IN_TREE_APISERVER
        .split("---\n")
        .next()
        .unwrap_or_default()
        .replace(
            "kube-apiserver:v1.25.16",
            "openstack-cloud-controller-manager:v1.31.0",
        )
        .replace(
            "- kube-apiserver\n",
            "- /bin/openstack-cloud-controller-manager\n",
        );
    let (_, items) = check_file("ccm.yaml", &ccm, &[]);
    assert!(
        items
            .iter()
            .any(|(k, m)| *k == ItemKind::Warning && m.contains("cluster name")),
        "{items:?}"
    );
}

/// A cloud.conf template of the kind clusterctl and envsubst fill in: `${…}` values.
const PLACEHOLDER_INI: &str = "[Global]\nauth-url = ${OS_AUTH_URL}\napplication-credential-id = ${OS_APP_CRED_ID}\n\
                               region = ${OS_REGION:-RegionOne}\n[LoadBalancer]\nmonitor-delay = ${MONITOR_DELAY}\n\
                               create-monitor = ${CREATE_MONITOR}\nprovider-requires-serial-api-calls = true\n";

#[test]
fn an_ini_config_with_placeholders_is_read_as_ini_with_unknown_values() {
    let engine = engine();
    let dir = tempfile::tempdir().expect("tempdir");
    let named = dir.path().join("cloud.conf");
    std::fs::write(&named, PLACEHOLDER_INI).expect("write");
    let walked = dir.path().join("capi").join("cloud-config.txt");
    std::fs::create_dir_all(walked.parent().unwrap()).expect("mkdir");
    std::fs::write(&walked, PLACEHOLDER_INI).expect("write");
    for (paths, extra) in [
        (vec![named.as_path()], vec![]),
        (vec![dir.path()], vec!["--ini", "**/cloud-config.txt"]),
    ] {
        let report = check::check(&options(&paths, &extra), &engine, &mut std::io::empty())
            .expect("check runs");
        let file = report
            .files
            .iter()
            .find(|f| f.name.ends_with("cloud.conf") || f.name.ends_with("cloud-config.txt"))
            .expect("the INI file");
        assert!(file.template.is_none(), "{:?}", file.template);
        assert!(file.problems.is_empty(), "{:?}", file.problems);
        let items: Vec<&Item> = file.objects.iter().flat_map(|o| &o.items).collect();
        assert!(!file.objects.is_empty(), "read as INI");
        assert!(
            items.iter().all(|i| i.kind != ItemKind::Denial),
            "{items:?}"
        );
        // The two typed placeholders (a duration, a boolean) are said to be unknown.
        let unknown: Vec<usize> = items
            .iter()
            .filter(|i| i.message.contains("placeholder"))
            .map(|i| i.line)
            .collect();
        assert_eq!(unknown, vec![6, 7], "{items:?}");
    }
    // The webhook reads the same config in a Secret the same way: no denial.
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cloud-config", "namespace": "kube-system"},
        "stringData": {"cloud.conf": PLACEHOLDER_INI}});
    let v = webhook(&engine, Webhook::Validate, &secret);
    assert_eq!(v["allowed"], true, "{v}");
    assert!(v["warnings"].to_string().contains("placeholder"), "{v}");
    // A real type error next to the placeholders is still denied.
    let broken = PLACEHOLDER_INI.replace("= true", "= maybe");
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cloud-config", "namespace": "kube-system"},
        "stringData": {"cloud.conf": broken}});
    assert_eq!(
        webhook(&engine, Webhook::Validate, &secret)["allowed"],
        false
    );
}

#[test]
fn a_yaml_tpl_file_named_on_the_command_line_is_read() {
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         stringData:\n  cloud.conf: \"{CONF}\"\n"
    );
    let (report, items) = check_file("cloud-config.yaml.tpl", &secret, &[]);
    assert!(
        report.files[0].template.is_none(),
        "{:?}",
        report.files[0].template
    );
    assert!(
        items.iter().any(|(k, _)| *k == ItemKind::Denial),
        "{items:?}"
    );
    // Found while walking, the same file is still a template (it is not what is applied).
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("cloud-config.yaml.tpl"), &secret).expect("write");
    std::fs::write(dir.path().join("other.yaml"), "a: 1\n").expect("write");
    let report = check::check(
        &options(&[dir.path()], &["--ini", "*.tpl"]),
        &engine(),
        &mut std::io::empty(),
    );
    // `--ini` matching it reads it as INI (what was asked), never as a silent skip.
    let report = report.expect("check runs");
    assert!(report.files.iter().any(|f| f.name.ends_with(".tpl")));
    // A named .tpl holding template markers is still a template.
    let (report, items) = check_file(
        "secret.yaml.tpl",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ .name }}\n",
        &[],
    );
    assert!(report.files[0].template.is_some());
    assert!(items.is_empty());
}

// --- Real layouts (issue 23): read, or said to be unseen -----------------------------------

const DELIVERY: &str = "tests/fixtures/delivery";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(DELIVERY)
            .join(name),
    )
    .expect("fixture")
}

/// Every object of `text`, through `/validate` and `/mutate`: (allowed, warnings, patched).
fn through_webhook(text: &str) -> Vec<(bool, String, bool)> {
    let engine = engine();
    stackgate::yaml::parse_stream(text)
        .expect("parses")
        .iter()
        .map(|d| d.root.to_json().expect("json"))
        .filter(|v| v.is_object())
        .map(|object| {
            let v = webhook(&engine, Webhook::Validate, &object);
            let m = webhook(&engine, Webhook::Mutate, &object);
            (
                v["allowed"] == true,
                v["warnings"].to_string(),
                m["patch"].is_string(),
            )
        })
        .collect()
}

#[test]
fn a_k0s_clusterconfig_inside_k0smotron_is_read() {
    let real = fixture("k0smotron-openstack.yaml");
    // As published: `secret.create: false` (the Secret is provided apart), so the values hold
    // no cloud config; the chart's values are read (the cluster-name warning says so).
    let (_, items) = check_file("k0smotron.yaml", &real, &[]);
    assert!(
        items
            .iter()
            .all(|(_, m)| !m.contains("provider-requires-serial-api-calls")),
        "{items:?}"
    );
    assert!(
        items
            .iter()
            .any(|(_, m)| m.contains("spec.k0sConfig.spec.extensions.helm.charts[0].values"))
    );
    // With the chart rendering the Secret from a cloudConfig without serial calls: both faces
    // warn and patch.
    let derived = real.replacen(
        "                create: false\n",
        "                create: true\n              cloudConfig:\n                global:\n                  region: RegionOne\n",
        1,
    );
    let (_, items) = check_file("k0smotron.yaml", &derived, &[]);
    assert!(
        items.iter().any(|(k, m)| *k == ItemKind::Mutation
            && m.contains(
                "K0smotronControlPlane default/openstack-hcp-cluster-cp charts[0].values line "
            )
            && m.contains("At spec.k0sConfig.spec.extensions.helm.charts[0].values, cloudConfig")),
        "{items:?}"
    );
    let faces = through_webhook(&derived);
    assert_eq!(faces.len(), 1);
    assert!(faces[0].0 && faces[0].2, "{faces:?}");
    assert!(faces[0].1.contains("serial-lb-api-calls"), "{faces:?}");
}

#[test]
fn a_k0s_clusterconfig_inside_a_k0sctl_file_is_read_by_check() {
    let (_, items) = check_file("k0sctl.yaml", &fixture("k0sctl-cluster.yaml"), &[]);
    assert!(
        items.iter().any(|(k, m)| *k == ItemKind::Mutation
            && m.contains("Cluster k0s-cluster charts[0].values line ")
            && m.contains("At spec.k0s.config.spec.extensions.helm.charts[0].values, cloudConfig")),
        "{items:?}"
    );
}

#[test]
fn azimuth_addon_objects_are_said_to_be_unseen() {
    for (file, object) in [
        (
            "azimuth-openstack-ccm.yaml",
            "HelmRelease example-openstack-ccm spec.valuesSources",
        ),
        (
            "azimuth-cloud-config.yaml",
            "Manifests example-cloud-config spec.manifestSources",
        ),
    ] {
        let text = fixture(file);
        let (_, items) = check_file(file, &text, &[]);
        assert_eq!(items.len(), 1, "{file}: {items:?}");
        assert_eq!(items[0].0, ItemKind::Warning);
        assert!(
            items[0].1.starts_with(object)
                && items[0].1.contains("Jinja2 template")
                && items[0].1.contains("cannot see"),
            "{file}: {items:?}"
        );
        // Nothing of the template's content is repeated.
        assert!(!items[0].1.contains("floating-network-id") && !items[0].1.contains("tolerations"));
        let faces = through_webhook(&text);
        assert_eq!(faces.len(), 1);
        assert!(faces[0].0 && !faces[0].2, "{file}: {faces:?}");
        assert!(
            faces[0].1.contains("cloud-config-integrity"),
            "{file}: {faces:?}"
        );
    }
    // A Manifests that embeds no cloud config is not mentioned.
    let other = fixture("azimuth-cloud-config.yaml").replace("name: cloud-config", "name: other");
    let (_, items) = check_file("other.yaml", &other, &[]);
    assert!(items.is_empty(), "{items:?}");
    // An addon HelmRelease of another chart is not mentioned.
    let other = fixture("azimuth-openstack-ccm.yaml").replace(
        "name: openstack-cloud-controller-manager",
        "name: cinder-csi",
    );
    let (_, items) = check_file("other-chart.yaml", &other, &[]);
    assert!(items.is_empty(), "{items:?}");
}

#[test]
fn giant_swarm_umbrella_values_are_read_and_its_app_is_said_to_be_unseen() {
    // The umbrella's own top-level cloudConfig is what its Secret template renders.
    let (_, items) = check_file(
        "giantswarm-app-values.yaml",
        &fixture("giantswarm-app-values.yaml"),
        &[
            "--values-for",
            "cloud-provider-openstack-app=*giantswarm-app-values.yaml",
        ],
    );
    assert!(
        items
            .iter()
            .any(|(k, m)| *k == ItemKind::Mutation && m.contains("cloudConfig.loadBalancer")),
        "{items:?}"
    );
    // A Flux HelmRelease of the umbrella chart: both faces.
    let release = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "cpo", "namespace": "kube-system"},
        "spec": {"chart": {"spec": {"chart": "cloud-provider-openstack-app"}},
            "values": {"secret": {"create": true},
                "cloudConfig": {"loadBalancer": {"provider-requires-serial-api-calls": false}}}}});
    let engine = engine();
    assert_eq!(
        webhook(&engine, Webhook::Validate, &release)["allowed"],
        false
    );
    let (_, items) = check_file("release.json", &release.to_string(), &[]);
    assert!(
        items.iter().any(|(k, _)| *k == ItemKind::Denial),
        "{items:?}"
    );
    // The App that installs it names values in ConfigMaps: unseen, named.
    // Picked by kind and group, so samples added to the file change nothing here.
    let app = stackgate::yaml::parse_stream(&fixture("chart-samples.yaml"))
        .expect("parses")
        .iter()
        .map(|d| d.root.to_json().expect("json"))
        .find(|v| v["kind"] == "App" && v["apiVersion"] == "application.giantswarm.io/v1alpha1")
        .expect("chart-samples.yaml holds a Giant Swarm App");
    let (_, items) = check_file("app.json", &app.to_string(), &[]);
    assert_eq!(items.len(), 1, "{items:?}");
    assert!(items[0].1.contains("ConfigMap cpo-user-values") && items[0].1.contains("cannot see"));
    assert!(
        items[0].1.contains("spec.userConfig"),
        "the field is named: {items:?}"
    );
    // An App of another chart is not mentioned.
    let mut other = app.clone();
    other["spec"]["name"] = json!("ingress-nginx");
    let (_, items) = check_file("other-app.json", &other.to_string(), &[]);
    assert!(items.is_empty(), "{items:?}");
}
