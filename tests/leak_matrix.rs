//! The leak matrix (ARCHITECTURE invariant 5, issue 31 item 5): a canary credential through
//! every Secret-fed input `check` reads × every output format it writes. The canary is in
//! values, in key and section names, in a continued (bare-key) line, in a comment, in a
//! `valuesFrom` Secret's `image.tag` and in the CCM arguments of a ClusterResourceSet payload;
//! no output (stdout, or stderr with logs at trace level; text, JSON, SARIF, JUnit) may show
//! it, and each case asserts that its input was read and evaluated, so a case that
//! stops exercising the masking fails instead of passing empty.
//!
//! The webhook's faces (answers, warnings, audit annotations, logs at trace level, metrics)
//! are scanned with the same canary by `tests/rules_https.rs` (every rule, over HTTPS) and the
//! guard's clouds.yaml `auth_url` masking by the table in `src/guard/clouds.rs`.

use std::process::{Command, Output, Stdio};

const CANARY: &str = "S3cr3t-CANARY-P4ss";

/// The formats of `check`.
const FORMATS: [&str; 4] = ["text", "json", "sarif", "junit"];

/// A CCM cloud config carrying the canary everywhere a Secret's text can be: a value, a value
/// continued on the next line (gcfg reads it as a bare key), a comment, a section name, an
/// unknown key's name and value.
fn canary_config() -> String {
    format!(
        "[Global]
auth-url=https://keystone.example.test:5000/v3
username=occm
password =
{CANARY}-bare
region=RegionOne
# old password {CANARY}-comment
[{CANARY}-section]
{CANARY}-key = {CANARY}-value

[LoadBalancer]
subnet-id={CANARY}-subnet
floating-network-id =
{CANARY}-lb-bare
[{CANARY}-tail]
{CANARY}-tail-key
"
    )
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// A Secret holding the canary config in `stringData`.
fn string_data_secret() -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         type: Opaque\nstringData:\n  cloud.conf: |\n{}",
        indent(&canary_config(), 4)
    )
}

/// The same Secret with the config as base64 `data`, wrapped at 76 columns.
fn data_secret() -> String {
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(canary_config());
    let wrapped: String = encoded
        .as_bytes()
        .chunks(76)
        .map(|c| format!("    {}\n", String::from_utf8_lossy(c)))
        .collect();
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         data:\n  cloud.conf: |\n{wrapped}"
    )
}

/// CCM chart values with the canary in the cloud config's names and values and in
/// `image.tag` (the one values leaf a message prints: the CCM release a rule names).
/// `amphorav2` needs CCM v1.34, newer than the tag's v1.31, so the release is printed.
fn canary_values() -> String {
    format!(
        "image:\n  tag: v1.31.0-{CANARY}-tag\ncluster:\n  name: kubernetes-{CANARY}\n\
         controllerExtraArgs: |-\n  - --concurrent-service-syncs=9{CANARY}\ncloudConfig:\n  global:\n    \
         auth-url: https://keystone.example.test:5000/v3\n    password: {CANARY}-password\n  \
         loadBalancer:\n    lb-provider: amphorav2\n    subnet-id: {CANARY}-subnet\n  \
         {CANARY}-section:\n    {CANARY}-key: {CANARY}-value\n"
    )
}

/// A Flux HelmRelease of the CCM chart reading its values from a Secret (`valuesFrom`).
fn values_from_secret() -> String {
    format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: occm\n  \
         namespace: kube-system\nspec:\n  chart:\n    spec:\n      \
         chart: openstack-cloud-controller-manager\n      version: 2.31.0\n      \
         sourceRef: {{kind: HelmRepository, name: cpo}}\n  valuesFrom:\n  - kind: Secret\n    \
         name: occm-values\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: occm-values\n  \
         namespace: kube-system\ntype: Opaque\nstringData:\n  values.yaml: |\n{}",
        indent(&canary_values(), 4)
    )
}

/// A Secret labelled as the CCM chart's values (`stackgate.dev/ccm-values`).
fn labelled_values_secret() -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: occm-labelled-values\n  \
         namespace: kube-system\n  labels:\n    stackgate.dev/ccm-values: values.yaml\n\
         type: Opaque\nstringData:\n  values.yaml: |\n{}",
        indent(&canary_values(), 4)
    )
}

/// A ClusterResourceSet payload Secret embedding the canary cloud-config Secret.
/// Its second key holds the CCM DaemonSet with the canary in the arguments the workload
/// rules read (`--cluster-name`, `--concurrent-service-syncs`).
fn crs_payload_secret() -> String {
    let daemonset = format!(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: openstack-cloud-controller-manager\n  \
         namespace: kube-system\nspec:\n  selector:\n    matchLabels: {{k8s-app: occm}}\n  \
         template:\n    metadata:\n      labels: {{k8s-app: occm}}\n    spec:\n      \
         containers:\n      - name: openstack-cloud-controller-manager\n        \
         image: registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0-{CANARY}\n        \
         args:\n        - /bin/openstack-cloud-controller-manager\n        \
         - --cluster-name={CANARY}-cluster\n        - --concurrent-service-syncs=9{CANARY}\n        \
         - --cloud-config=/etc/config/cloud.conf\n"
    );
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: ccm-cloud-config-crs\n  \
         namespace: default\ntype: addons.cluster.x-k8s.io/resource-set\nstringData:\n  \
         cloud-config.yaml: |\n{}  ccm.yaml: |\n{}",
        indent(&string_data_secret(), 4),
        indent(&daemonset, 4)
    )
}

fn check(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .arg("check")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("STACKGATE_POLICIES")
        .env("STACKGATE_LOG_LEVEL", "trace")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("stackgate runs");
    // Nothing on standard input: closing it ends any read.
    drop(child.stdin.take());
    child.wait_with_output().expect("output")
}

fn all_output(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Every Secret-fed input × every `check` format: the canary never shows, and each input's
/// expected finding does (the input was read and evaluated).
#[test]
fn a_canary_in_any_secret_input_appears_in_no_check_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: [(&str, String, &[&str]); 5] = [
        (
            "string-data.yaml",
            string_data_secret(),
            &["serial-lb-api-calls"],
        ),
        ("data.yaml", data_secret(), &["serial-lb-api-calls"]),
        (
            "values-from.yaml",
            values_from_secret(),
            &["cloud-config-integrity"],
        ),
        (
            "labelled.yaml",
            labelled_values_secret(),
            &["serial-lb-api-calls"],
        ),
        (
            "crs.yaml",
            crs_payload_secret(),
            &["serial-lb-api-calls", "ccm-concurrency"],
        ),
    ];
    for (file, text, expected) in &cases {
        let path = dir.path().join(file);
        std::fs::write(&path, text).expect("write");
        for format in FORMATS {
            let o = check(&["--format", format, path.to_str().expect("UTF-8 path")]);
            let shown = all_output(&o);
            assert!(
                !shown.contains("CANARY"),
                "{format} output of {file} shows the canary:\n{shown}"
            );
            for finding in *expected {
                assert!(shown.contains(finding), "{format} of {file}: {shown}");
            }
        }
    }
}

/// The release a `valuesFrom` Secret's `image.tag` pins is named by the Secret, not by the tag.
#[test]
fn a_secret_image_tag_is_named_by_its_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("values-from.yaml");
    std::fs::write(&path, values_from_secret()).expect("write");
    let o = check(&[path.to_str().expect("UTF-8 path")]);
    let shown = all_output(&o);
    assert!(
        shown.contains("values image.tag <from Secret kube-system/occm-values, not shown>, v1.31"),
        "{shown}"
    );
}

/// The fix shown for a Secret is a masked diff of the decoded config: the context holds the
/// bare key and the unknown section, masked, but the shape is shown; after `--fix` writes it,
/// the report still masks everything.
#[test]
fn a_secret_fix_is_shown_masked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("string-data.yaml");
    std::fs::write(&path, string_data_secret()).expect("write");
    let file = path.to_str().expect("UTF-8 path");
    let o = check(&[file]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("values masked"), "{text}");
    assert!(
        text.contains(
            " subnet-id= ***\n floating-network-id =\n ***\n+provider-requires-serial-api-calls=true\n [***]\n ***\n"
        ),
        "{text}"
    );
    let o = check(&["--fix", "--format", "json", file]);
    let report = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!report.contains("CANARY"), "{report}");
    let json: serde_json::Value = serde_json::from_str(&report).expect("JSON report");
    assert_eq!(json["summary"]["fixed"], 1, "{report}");
}
