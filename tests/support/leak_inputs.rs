//! Secret-fed inputs carrying one canary credential, shared by the leak matrix's faces:
//! `check` reads them as files (tests/leak_matrix.rs), the webhook as AdmissionReviews
//! (tests/leak_matrix.rs) and `audit` and the background audit from a fake cluster
//! (tests/audit.rs). One set of inputs, so a face cannot be tested on an easier one.
#![allow(dead_code)]

use serde_json::{Value, json};

pub const CANARY: &str = "S3cr3t-CANARY-P4ss";

/// A CCM cloud config carrying the canary everywhere a Secret's text can be: a value, a value
/// continued on the next line (gcfg reads it as a bare key), a comment, a section name, an
/// unknown key's name and value.
pub fn canary_config() -> String {
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

pub fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines().map(|l| format!("{pad}{l}\n")).collect()
}

/// A Secret holding the canary config in `stringData`.
pub fn string_data_secret() -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         type: Opaque\nstringData:\n  cloud.conf: |\n{}",
        indent(&canary_config(), 4)
    )
}

/// The same Secret with the config as base64 `data`, wrapped at 76 columns.
pub fn data_secret() -> String {
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
pub fn canary_values() -> String {
    format!(
        "image:\n  tag: v1.31.0-{CANARY}-tag\ncluster:\n  name: kubernetes-{CANARY}\n\
         controllerExtraArgs: |-\n  - --concurrent-service-syncs=9{CANARY}\ncloudConfig:\n  global:\n    \
         auth-url: https://keystone.example.test:5000/v3\n    password: {CANARY}-password\n  \
         loadBalancer:\n    lb-provider: amphorav2\n    subnet-id: {CANARY}-subnet\n  \
         {CANARY}-section:\n    {CANARY}-key: {CANARY}-value\n"
    )
}

/// A Flux HelmRelease of the CCM chart reading its values from a Secret (`valuesFrom`).
pub fn values_from_secret() -> String {
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
pub fn labelled_values_secret() -> String {
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
pub fn crs_payload_secret() -> String {
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

/// The objects of a YAML stream as the apiserver stores and sends them: a Secret's
/// `stringData` merged into `data` as base64, as the apiserver does before admission.
pub fn apiserver_objects(yaml: &str) -> Vec<Value> {
    use base64::Engine as _;
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("the inputs are YAML");
    docs.into_iter()
        .map(|mut object| {
            if let Some(string_data) = object
                .as_object_mut()
                .and_then(|o| o.remove("stringData"))
                .and_then(|v| v.as_object().cloned())
            {
                let data = object
                    .as_object_mut()
                    .expect("an object")
                    .entry("data")
                    .or_insert_with(|| json!({}));
                for (key, text) in string_data {
                    data[key.as_str()] = json!(
                        base64::engine::general_purpose::STANDARD
                            .encode(text.as_str().unwrap_or_default())
                    );
                }
            }
            if let Some(data) = object.get_mut("data").and_then(Value::as_object_mut) {
                // `data` written as a wrapped block in YAML: the apiserver holds one string.
                for value in data.values_mut() {
                    if let Some(s) = value.as_str() {
                        *value = json!(s.split_whitespace().collect::<String>());
                    }
                }
            }
            object
        })
        .collect()
}

/// Every Secret-fed input: a file name, its YAML, and the policy each face must still report
/// (so a case that stops being read fails instead of passing empty).
pub fn inputs() -> Vec<(&'static str, String, &'static [&'static str])> {
    vec![
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
    ]
}
