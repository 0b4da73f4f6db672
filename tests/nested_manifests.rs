//! Carriers that nest the CCM's cloud config or chart values in a manifest stream inside a
//! string, read with the one nested-manifest reader (`sites::payload::read_nested`; issue 33
//! item 5), and carriers read as values: each through the validating and mutating webhook
//! (`admission::handle`, the patch applied) and `stackgate check`.
//! - Azimuth `Manifests` / `HelmRelease` templates with no template syntax (read as written);
//! - k0s `helm.k0sproject.io/v1beta1` `Chart` objects alone, in a `K0sControlPlane`'s
//!   `spec.k0sConfigSpec.files[].content` (k0rdent's `openstack-standalone-cp` template) and in
//!   a ConfigMap a `K0smotronControlPlane` lists in `spec.manifests`;
//! - Rancher `provisioning.cattle.io/v1` `Cluster.spec.rkeConfig.additionalManifest`.

#[path = "support/in_process.rs"]
mod in_process;

use base64::Engine as _;
use clap::Parser;
use serde_json::{Value, json};
use stackgate::admission::Webhook;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::report::{Level, Report};

const SERIAL: &str = "provider-requires-serial-api-calls";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn engine() -> Engine {
    in_process::engine()
}

fn respond(webhook: Webhook, object: &Value) -> Value {
    in_process::respond(webhook, object, "nested-manifests")
}

fn validate(object: &Value) -> (bool, String) {
    in_process::validate(object, "nested-manifests")
}

fn mutated(object: &Value) -> Option<Value> {
    let response = respond(Webhook::Mutate, object);
    assert_eq!(response["allowed"], true, "mutate never denies: {response}");
    let patch = response["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .expect("base64 patch");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("JSON Patch");
    let mut out = object.clone();
    json_patch::patch(&mut out, &patch).expect("the patch applies");
    Some(out)
}

fn check(object: &Value) -> Report {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("object.json");
    std::fs::write(&file, object.to_string()).expect("write");
    let argv = ["check".to_owned(), file.display().to_string()];
    let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args);
    check::check(&options, &engine(), &mut std::io::empty()).expect("check runs")
}

fn items(report: &Report) -> Vec<(Level, Option<&'static str>, String)> {
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .filter(|i| i.rule != "cluster-name")
        .map(|i| (i.level, i.code, i.message.clone()))
        .collect()
}

/// Denied by both faces for `provider-requires-serial-api-calls`, the message naming `at`.
fn denied_by_both(object: &Value, at: &str) {
    let (allowed, text) = validate(object);
    assert!(
        !allowed && text.contains(SERIAL) && text.contains(at),
        "{text}"
    );
    let found = items(&check(object));
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(SERIAL) && m.contains(at)),
        "{found:#?}"
    );
}

fn values(serial: Option<bool>) -> String {
    let mut out = "cloudConfig:\n  global:\n    region: r\n".to_owned();
    if let Some(v) = serial {
        out.push_str(&format!("  loadBalancer:\n    {SERIAL}: {v}\n"));
    }
    out
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| format!("{pad}{l}\n"))
        .collect::<String>()
}

fn rke2_helm_chart(serial: Option<bool>) -> String {
    format!(
        "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: occm\n  namespace: kube-system\n\
         spec:\n  chart: openstack-cloud-controller-manager\n  version: 2.31.1\n  valuesContent: |\n{}",
        indent(&values(serial), 4)
    )
}

fn k0s_chart(serial: Option<bool>) -> String {
    format!(
        "apiVersion: helm.k0sproject.io/v1beta1\nkind: Chart\nmetadata:\n  name: openstack-cloud-controller-manager\n  \
         namespace: kube-system\nspec:\n  chartName: openstack-cloud-controller-manager/openstack-cloud-controller-manager\n  \
         version: 2.35.0\n  releaseName: openstack-cloud-controller-manager\n  namespace: kube-system\n  values: |\n{}",
        indent(&values(serial), 4)
    )
}

/// The serial setting in the first values string of a manifest stream (after a patch).
fn serial_in(stream: &str) -> bool {
    stream.contains(&format!("{SERIAL}: true"))
}

fn rancher_cluster(manifest: String) -> Value {
    json!({"apiVersion": "provisioning.cattle.io/v1", "kind": "Cluster",
        "metadata": {"name": "downstream", "namespace": "fleet-default"},
        "spec": {"kubernetesVersion": "v1.31.4+rke2r1",
            "rkeConfig": {"additionalManifest": manifest}}})
}

#[test]
fn rancher_additional_manifest_helmchart_is_read_and_fixed_in_place() {
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: other\ndata:\n  a: b\n---\n";
    let off = rancher_cluster(format!("{cm}{}", rke2_helm_chart(Some(false))));
    denied_by_both(&off, "spec.rkeConfig.additionalManifest");
    let missing = rancher_cluster(format!("{cm}{}", rke2_helm_chart(None)));
    let (allowed, text) = validate(&missing);
    assert!(allowed, "{text}");
    let fixed = mutated(&missing).expect("a patch");
    let stream = fixed["spec"]["rkeConfig"]["additionalManifest"]
        .as_str()
        .expect("string");
    assert!(serial_in(stream), "{stream}");
    assert!(
        stream.starts_with(cm),
        "the rest of the stream is kept: {stream}"
    );
    let (allowed, text) = validate(&fixed);
    assert!(allowed && !text.contains("is not set"), "{text}");
    // A cloud-config Secret in the stream is read too.
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
                  stringData:\n  cloud.conf: |\n    [Global]\n    region = r\n    [LoadBalancer]\n    \
                  provider-requires-serial-api-calls = false\n";
    denied_by_both(
        &rancher_cluster(secret.to_owned()),
        "spec.rkeConfig.additionalManifest",
    );
    // Other manifests: nothing to say.
    let (allowed, text) = validate(&rancher_cluster(cm.to_owned()));
    assert!(allowed && text.is_empty(), "{text}");
}

#[test]
fn k0s_chart_objects_are_read_alone_in_control_plane_files_and_in_manifest_configmaps() {
    let chart: Value = serde_json::to_value(
        stackgate::yaml::parse_one(&k0s_chart(Some(false)))
            .expect("yaml")
            .to_json()
            .expect("json"),
    )
    .expect("value");
    denied_by_both(&chart, "spec.values");
    let mut missing = chart.clone();
    missing["spec"]["values"] = json!(values(None));
    let fixed = mutated(&missing).expect("a patch");
    assert!(
        serial_in(fixed["spec"]["values"].as_str().expect("values")),
        "{fixed}"
    );
    // In a K0sControlPlane's files (k0rdent's openstack-standalone-cp shape).
    let control_plane = |content: String| {
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "K0sControlPlane",
            "metadata": {"name": "cp", "namespace": "default"},
            "spec": {"replicas": 1, "version": "v1.31.2+k0s.0",
                "k0sConfigSpec": {"files": [
                    {"path": "/etc/ssl/certs/x.pem", "contentFrom": {"secretRef": {"name": "ca", "key": "ca.crt"}}},
                    {"path": "/var/lib/k0s/manifests/kcm/1-chart-openstack-cloud-controller-manager.yaml",
                     "permissions": "0644", "content": content}]}}})
    };
    denied_by_both(
        &control_plane(k0s_chart(Some(false))),
        "spec.k0sConfigSpec.files[1].content",
    );
    let fixed = mutated(&control_plane(k0s_chart(None))).expect("a patch");
    let content = fixed["spec"]["k0sConfigSpec"]["files"][1]["content"]
        .as_str()
        .expect("content");
    assert!(serial_in(content), "{content}");
    // In a ConfigMap a K0smotronControlPlane lists in spec.manifests.
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cp-manifests", "namespace": "default"},
        "data": {"occm.yaml": k0s_chart(Some(false))}});
    denied_by_both(&configmap, "data[\"occm.yaml\"]");
}

fn azimuth_manifests(template: String) -> Value {
    json!({"apiVersion": "addons.stackhpc.com/v1alpha1", "kind": "Manifests",
        "metadata": {"name": "cloud-config", "namespace": "default"},
        "spec": {"clusterName": "c", "bootstrap": true, "manifestSources": [{"template": template}]}})
}

#[test]
fn azimuth_templates_without_template_syntax_are_read_as_written() {
    let secret = |serial: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
             stringData:\n  cloud.conf: |\n    [Global]\n    region = r\n{serial}"
        )
    };
    let off = azimuth_manifests(secret(
        "    [LoadBalancer]\n    provider-requires-serial-api-calls = false\n",
    ));
    denied_by_both(&off, "spec.manifestSources[0].template");
    let fixed = mutated(&azimuth_manifests(secret(""))).expect("a patch");
    let template = fixed["spec"]["manifestSources"][0]["template"]
        .as_str()
        .expect("template");
    assert!(
        template.contains("provider-requires-serial-api-calls = true"),
        "{template}"
    );
    // With template syntax: named, not read.
    let templated = azimuth_manifests(secret("    auth-url = {{ cloud.auth_url }}\n"));
    let (allowed, text) = validate(&templated);
    assert!(
        allowed && text.contains("spec.manifestSources") && text.contains("cannot see"),
        "{text}"
    );
    // An addon HelmRelease whose one values source is a template-free template.
    let release = |template: String| {
        json!({"apiVersion": "addons.stackhpc.com/v1alpha1", "kind": "HelmRelease",
            "metadata": {"name": "ccm", "namespace": "default"},
            "spec": {"clusterName": "c", "bootstrap": true,
                "chart": {"repo": "https://kubernetes.github.io/cloud-provider-openstack",
                    "name": "openstack-cloud-controller-manager", "version": "2.31.1"},
                "releaseName": "ccm", "targetNamespace": "kube-system",
                "valuesSources": [{"template": template}]}})
    };
    denied_by_both(
        &release(values(Some(false))),
        "spec.valuesSources[0].template",
    );
    let fixed = mutated(&release(values(None))).expect("a patch");
    let template = fixed["spec"]["valuesSources"][0]["template"]
        .as_str()
        .expect("template");
    assert!(serial_in(template), "{template}");
    let (allowed, text) = validate(&release(format!(
        "{}cluster:\n  name: {{{{ cluster.metadata.name }}}}\n",
        values(Some(false))
    )));
    assert!(
        allowed && text.contains("spec.valuesSources") && text.contains("cannot see"),
        "{text}"
    );
}

/// `stackgate check` over a file named `name` holding `text`.
fn check_text(name: &str, text: &str) -> Report {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(name);
    std::fs::write(&file, text).expect("write");
    let argv = ["check".to_owned(), file.display().to_string()];
    let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args);
    check::check(&options, &engine(), &mut std::io::empty()).expect("check runs")
}

#[test]
fn talos_inline_manifests_are_read_by_check() {
    let talos = |contents: &str| {
        format!(
            "version: v1alpha1\ndebug: false\npersist: true\nmachine:\n  type: controlplane\n\
             cluster:\n  clusterName: demo\n  externalCloudProvider:\n    enabled: true\n  \
             inlineManifests:\n    - name: occm\n      contents: |\n{}",
            indent(contents, 8)
        )
    };
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
                  stringData:\n  cloud.conf: |\n    [Global]\n    region = r\n    [LoadBalancer]\n    \
                  provider-requires-serial-api-calls = false\n";
    let found = items(&check_text("controlplane.yaml", &talos(secret)));
    assert!(
        found.iter().any(|(l, _, m)| *l == Level::Error
            && m.contains(SERIAL)
            && m.contains(" cluster.inlineManifests[0].contents (occm): ")
            && m.contains("\nAt Talos machine config document 1 (Secret kube-system/cloud-config")),
        "{found:#?}"
    );
    // A machine config without such manifests: nothing, and no "not a Kubernetes object".
    let report = check_text(
        "worker.yaml",
        "version: v1alpha1\nmachine:\n  type: worker\ncluster:\n  clusterName: demo\n",
    );
    assert!(items(&report).is_empty());
    assert!(report.files.iter().all(|f| f.problems.is_empty()));
}

#[test]
fn kubeone_cloud_config_is_read_by_check() {
    let kubeone = |serial: &str| {
        format!(
            "apiVersion: kubeone.k8c.io/v1beta2\nkind: KubeOneCluster\nname: demo\nversions:\n  kubernetes: 1.31.4\n\
             cloudProvider:\n  openstack: {{}}\n  external: true\n  cloudConfig: |\n    [Global]\n    \
             auth-url=https://keystone.example:5000/v3\n    [LoadBalancer]\n{serial}"
        )
    };
    let found = items(&check_text(
        "kubeone.yaml",
        &kubeone("    provider-requires-serial-api-calls = false\n"),
    ));
    assert!(
        found.iter().any(|(l, _, m)| *l == Level::Error
            && m.contains(SERIAL)
            && m.contains("KubeOneCluster demo cloudProvider.cloudConfig")),
        "{found:#?}"
    );
    // Another cloud provider: not an OpenStack cloud config.
    let aws = kubeone("").replace("openstack: {}", "aws: {}");
    assert!(items(&check_text("kubeone.yaml", &aws)).is_empty());
}

/// `stackgate check` over a directory holding `files`.
fn check_dir(files: &[(&str, &str)]) -> Report {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    let argv = ["check".to_owned(), dir.path().display().to_string()];
    let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args);
    check::check(&options, &engine(), &mut std::io::empty()).expect("check runs")
}

#[test]
fn kustomize_helm_charts_are_read_with_their_values_file() {
    let kustomization = |inline: &str| {
        format!(
            "helmCharts:\n  - name: openstack-cloud-controller-manager\n    \
             repo: https://kubernetes.github.io/cloud-provider-openstack\n    version: 2.31.1\n    \
             releaseName: occm\n    namespace: kube-system\n    valuesFile: values-occm.yaml\n{inline}"
        )
    };
    // The file's `false`, nothing inline: denied, placed in the kustomization.
    let off = values(Some(false));
    let report = check_dir(&[
        ("kustomization.yaml", &kustomization("")),
        ("values-occm.yaml", &off),
    ]);
    let found = items(&report);
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(SERIAL)),
        "{found:#?}"
    );
    // Inline values win over the file's (kustomize's default `valuesMerge: override`).
    let inline = format!("    valuesInline:\n{}", indent(&values(Some(true)), 6));
    let report = check_dir(&[
        ("kustomization.yaml", &kustomization(&inline)),
        ("values-occm.yaml", &off),
    ]);
    let found = items(&report);
    assert!(
        !found.iter().any(|(l, _, _)| *l == Level::Error),
        "{found:#?}"
    );
    // The file not in the run: named.
    let report = check_dir(&[("kustomization.yaml", &kustomization(""))]);
    let found = items(&report);
    assert!(
        found.iter().any(|(_, c, m)| *c == Some("values-unseen")
            && m.contains("values file values-occm.yaml of the kustomization")),
        "{found:#?}"
    );
    // Inline `false` alone: denied.
    let inline_off = format!(
        "helmCharts:\n  - name: openstack-cloud-controller-manager\n    version: 2.31.1\n    valuesInline:\n{}",
        indent(&values(Some(false)), 6)
    );
    let found = items(&check_dir(&[("kustomization.yaml", &inline_off)]));
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(SERIAL)),
        "{found:#?}"
    );
}
