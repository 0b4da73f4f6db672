//! Controller inputs stackgate used to pass over in silence (issue 33 item 4), each through
//! the validating and mutating webhook (`admission::handle`) and `stackgate check`:
//! - RKE2/k3s helm-controller `spec.valuesSecrets` on a HelmChart and a HelmChartConfig,
//!   mounted as values files after the object's `valuesContent` and `values`
//!   (k3s-io/helm-controller @ 21a911f86f912a79e06e4f1596c54d8237320e6e,
//!   `pkg/controllers/chart/chart.go`, `values-0-%03d-HelmChart-ValuesSecret.yaml`): named by
//!   the webhook, resolved by `check` when the Secret is among its inputs;
//! - HelmChart `spec.chartContent` (an inline chart archive that replaces the upstream chart);
//! - Flux `spec.chartRef` to an `OCIRepository` or source `HelmChart` not named after the chart;
//! - Flux `spec.postRenderers`, which change the rendered manifests after the values.

#[path = "support/in_process.rs"]
mod in_process;

use clap::Parser;
use serde_json::{Value, json};
use stackgate::admission::Webhook;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::report::{Level, Report};

const CHART: &str = "openstack-cloud-controller-manager";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn engine() -> Engine {
    in_process::engine()
}

fn respond(webhook: Webhook, object: &Value) -> Value {
    in_process::respond(webhook, object, "controller-inputs")
}

fn validate(object: &Value) -> (bool, String) {
    in_process::validate(object, "controller-inputs")
}

/// Whether the mutating webhook patches `object`.
fn patches(object: &Value) -> bool {
    let response = respond(Webhook::Mutate, object);
    assert_eq!(response["allowed"], true, "mutate never denies: {response}");
    response.get("patch").is_some_and(|p| !p.is_null())
}

/// `stackgate check` over a file holding `docs` as one YAML stream.
fn check(docs: &[Value]) -> Report {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("objects.yaml");
    let text: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string(d).expect("json"))
        .collect();
    std::fs::write(&file, text.join("\n---\n")).expect("write");
    let argv = ["check".to_owned(), file.display().to_string()];
    let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args);
    check::check(&options, &engine(), &mut std::io::empty()).expect("check runs")
}

/// `(level, code, message)` of every item `check` reports, cluster-name aside.
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

fn serial(value: bool) -> String {
    format!(
        "cloudConfig:\n  global:\n    region: r\n  loadBalancer:\n    provider-requires-serial-api-calls: {value}\n"
    )
}

fn helm_chart(values_content: &str, extra: Value) -> Value {
    let mut spec = json!({"chart": CHART, "repo": "https://kubernetes.github.io/cloud-provider-openstack",
        "version": "2.31.1", "valuesContent": values_content});
    for (k, v) in extra.as_object().expect("map") {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "occm", "namespace": "kube-system"}, "spec": spec})
}

fn values_secret(name: &str, key: &str, values: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "kube-system"},
        "stringData": {key: values}})
}

const DENIED: &str = "provider-requires-serial-api-calls";

#[test]
fn helmchart_values_secrets_are_named_by_the_webhook_as_set_over_its_values() {
    let secrets =
        json!({"valuesSecrets": [{"name": "occm-secret-values", "keys": ["values.yaml"]}]});
    // `false` in valuesContent: the Secret may set it back; `true`: the Secret may set it off.
    for value in [false, true] {
        let object = helm_chart(&serial(value), secrets.clone());
        let (allowed, text) = validate(&object);
        assert!(allowed, "{text}");
        assert!(
            text.contains("HelmChart kube-system/occm spec.valuesSecrets")
                && text.contains("values come from Secret occm-secret-values key values.yaml"),
            "{text}"
        );
        assert!(!patches(&object), "nothing is written over unseen values");
    }
    // Entries helm-controller does not mount (no keys, the object's own Secret) are not named.
    let skipped = json!({"valuesSecrets": [{"name": "x", "keys": []},
        {"name": "chart-values-occm", "keys": ["values.yaml"]}]});
    let (allowed, text) = validate(&helm_chart(&serial(false), skipped));
    assert!(!allowed && text.contains(DENIED), "{text}");
}

#[test]
fn helmchartconfig_values_secrets_are_named_by_the_webhook() {
    let config = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"valuesContent": serial(false),
            "valuesSecrets": [{"name": "s", "keys": ["a.yaml", "b.yaml"], "ignoreUpdates": true}]}});
    let (allowed, text) = validate(&config);
    assert!(allowed, "{text}");
    assert!(
        text.contains("spec.valuesSecrets")
            && text.contains("values come from Secret s keys a.yaml, b.yaml (optional)"),
        "{text}"
    );
}

#[test]
fn check_merges_values_secrets_in_helm_controller_order() {
    let secrets =
        json!({"valuesSecrets": [{"name": "occm-secret-values", "keys": ["values.yaml"]}]});
    // The Secret is mounted after valuesContent: its `false` wins.
    let report = check(&[
        helm_chart(&serial(true), secrets.clone()),
        values_secret("occm-secret-values", "values.yaml", &serial(false)),
    ]);
    let found = items(&report);
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(DENIED) && m.contains("false")),
        "{found:#?}"
    );
    assert!(
        !found.iter().any(|(_, c, _)| *c == Some("values-unseen")),
        "{found:#?}"
    );
    // And its `true` wins over valuesContent's `false`; a HelmChartConfig comes after both.
    let report = check(&[
        helm_chart(&serial(false), secrets.clone()),
        values_secret("occm-secret-values", "values.yaml", &serial(true)),
    ]);
    let found = items(&report);
    assert!(
        !found.iter().any(|(l, _, _)| *l == Level::Error),
        "{found:#?}"
    );
    let config = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"valuesContent": serial(false)}});
    let report = check(&[
        helm_chart(&serial(true), secrets.clone()),
        values_secret("occm-secret-values", "values.yaml", &serial(true)),
        config,
    ]);
    let found = items(&report);
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(DENIED)),
        "{found:#?}"
    );
    // Without the Secret in the run: named, as the webhook names it.
    let report = check(&[helm_chart(&serial(true), secrets)]);
    let found = items(&report);
    assert!(
        found.iter().any(|(_, c, m)| *c == Some("values-unseen")
            && m.contains("spec.valuesSecrets")
            && m.contains("Secret occm-secret-values key values.yaml")),
        "{found:#?}"
    );
    // The Secret's values are never printed.
    let leaked = check(&[
        helm_chart(
            &serial(true),
            json!({"valuesSecrets": [{"name": "v", "keys": ["k"]}]}),
        ),
        values_secret(
            "v",
            "k",
            "cloudConfig:\n  global:\n    password: hunter2-secret\n",
        ),
    ]);
    for (_, _, m) in items(&leaked) {
        assert!(!m.contains("hunter2-secret"), "{m}");
    }
}

#[test]
fn check_merges_the_helmchartconfig_values_secrets_after_its_values() {
    let config = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"valuesContent": serial(true),
            "valuesSecrets": [{"name": "cfg-secret", "keys": ["v.yaml"]}]}});
    let report = check(&[
        helm_chart(&serial(true), json!({})),
        config.clone(),
        values_secret("cfg-secret", "v.yaml", &serial(false)),
    ]);
    let found = items(&report);
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(DENIED)),
        "{found:#?}"
    );
    // An optional Secret's missing key is skipped, as helm-controller skips it; an optional
    // Secret the run does not hold may be in the cluster: named.
    let mut optional = config;
    optional["spec"]["valuesSecrets"][0]["ignoreUpdates"] = json!(true);
    let report = check(&[
        helm_chart(&serial(true), json!({})),
        optional.clone(),
        values_secret("cfg-secret", "other.yaml", &serial(false)),
    ]);
    let found = items(&report);
    assert!(found.is_empty(), "{found:#?}");
    let report = check(&[helm_chart(&serial(true), json!({})), optional]);
    let found = items(&report);
    assert!(
        found
            .iter()
            .any(|(_, c, m)| *c == Some("values-unseen") && m.contains("cfg-secret")),
        "{found:#?}"
    );
}

#[test]
fn helmchart_chart_content_is_named_not_read_as_the_upstream_chart() {
    let object = helm_chart(
        &serial(false),
        json!({"chartContent": "H4sIAAAAAAAA/wAAAP//AQAA//8AAAAAAAAAAA=="}),
    );
    let (allowed, text) = validate(&object);
    assert!(allowed, "{text}");
    assert!(
        text.contains("spec.chartContent") && text.contains("chart archive"),
        "{text}"
    );
    assert!(!patches(&object));
    let found = items(&check(&[object]));
    assert!(
        found
            .iter()
            .any(|(_, c, m)| *c == Some("values-unseen") && m.contains("spec.chartContent")),
        "{found:#?}"
    );
    assert!(
        !found.iter().any(|(l, _, _)| *l == Level::Error),
        "{found:#?}"
    );
    // An inline chart of another name with no CCM values: nothing to say.
    let mut other = helm_chart("replicas: 2\n", json!({"chartContent": "H4sI"}));
    other["spec"]["chart"] = json!("traefik");
    let (allowed, text) = validate(&other);
    assert!(allowed && text.is_empty(), "{text}");
}

fn release(chart_ref: Value, values: &str, extra: Value) -> Value {
    let values: Value = serde_yaml_values(values);
    let mut spec = json!({"interval": "10m", "chartRef": chart_ref, "values": values});
    for (k, v) in extra.as_object().expect("map") {
        spec[k] = v.clone();
    }
    json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "occm", "namespace": "kube-system"}, "spec": spec})
}

/// The CCM values as JSON (tests only write the serial key and a region).
fn serde_yaml_values(text: &str) -> Value {
    let value = text.contains("serial-api-calls: true");
    json!({"cloudConfig": {"global": {"region": "r"},
        "loadBalancer": {"provider-requires-serial-api-calls": value}}})
}

fn oci_repository(name: &str, url: &str) -> Value {
    json!({"apiVersion": "source.toolkit.fluxcd.io/v1beta2", "kind": "OCIRepository",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"interval": "1h", "url": url, "ref": {"tag": "2.31.1"}}})
}

#[test]
fn chart_ref_not_named_after_the_chart_is_named_by_the_webhook_and_resolved_by_check() {
    let reference = json!({"kind": "OCIRepository", "name": "occm-chart"});
    let object = release(reference.clone(), &serial(false), json!({}));
    let (allowed, text) = validate(&object);
    assert!(allowed, "{text}");
    assert!(
        text.contains("spec.chartRef")
            && text.contains("the chart of OCIRepository occm-chart (spec.chartRef)"),
        "{text}"
    );
    assert!(!patches(&object));
    // In check, the OCIRepository says which chart: the CCM's is read, and denied.
    let ccm = oci_repository(
        "occm-chart",
        &format!("oci://registry.example/charts/{CHART}"),
    );
    let found = items(&check(&[object.clone(), ccm]));
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(DENIED)),
        "{found:#?}"
    );
    assert!(
        !found.iter().any(|(_, c, _)| *c == Some("values-unseen")),
        "{found:#?}"
    );
    // Another chart: nothing, even when the reference is named after the CCM chart.
    let other = oci_repository("occm-chart", "oci://registry.example/charts/other-chart");
    let found = items(&check(&[object, other]));
    assert!(found.is_empty(), "{found:#?}");
    let named = release(
        json!({"kind": "OCIRepository", "name": CHART}),
        &serial(false),
        json!({}),
    );
    let (allowed, _) = validate(&named);
    assert!(!allowed, "a reference named after the chart is read as it");
    let elsewhere = oci_repository(CHART, "oci://registry.example/charts/other-chart");
    let found = items(&check(&[named, elsewhere]));
    assert!(found.is_empty(), "{found:#?}");
    // A source HelmChart names the chart in spec.chart.
    let source = json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmChart",
        "metadata": {"name": "occm-chart", "namespace": "kube-system"},
        "spec": {"chart": CHART, "version": "2.31.1",
            "sourceRef": {"kind": "HelmRepository", "name": "cpo"}}});
    let object = release(
        json!({"kind": "HelmChart", "name": "occm-chart"}),
        &serial(false),
        json!({}),
    );
    let found = items(&check(&[object, source]));
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(DENIED)),
        "{found:#?}"
    );
}

#[test]
fn post_renderers_are_named_beside_the_values_findings() {
    let post = json!({"postRenderers": [{"kustomize": {"patches": [{"target": {"kind": "Secret"},
        "patch": "- op: remove\n  path: /data"}]}}]});
    let mut object = release(json!(null), &serial(true), post.clone());
    object["spec"]
        .as_object_mut()
        .expect("spec")
        .remove("chartRef");
    object["spec"]["chart"] = json!({"spec": {"chart": CHART, "version": "2.31.1"}});
    let (allowed, text) = validate(&object);
    assert!(allowed, "{text}");
    assert!(
        text.contains("HelmRelease kube-system/occm spec.postRenderers")
            && text.contains("kustomize.patches")
            && text.contains("after stackgate checked the values"),
        "{text}"
    );
    // The values are still checked: `false` is still denied, and `true` is still patched in
    // when missing.
    let mut off = object.clone();
    off["spec"]["values"] = serde_yaml_values(&serial(false));
    let (allowed, text) = validate(&off);
    assert!(!allowed && text.contains(DENIED), "{text}");
    let mut missing = object.clone();
    missing["spec"]["values"] = json!({"cloudConfig": {"global": {"region": "r"}}});
    assert!(patches(&missing));
    let found = items(&check(&[object]));
    assert!(
        found.iter().any(|(l, c, m)| *l == Level::Warning
            && *c == Some("values-unseen")
            && m.contains("spec.postRenderers")),
        "{found:#?}"
    );
}

fn application_set(template_values: &str, patch: Option<&str>) -> Value {
    let mut object = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {"generators": [{"list": {"elements": [{"cluster": "a"}]}}],
            "template": {"metadata": {"name": "occm"},
                "spec": {"source": {"chart": CHART, "targetRevision": "2.31.1",
                    "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                    "helm": {"values": template_values}},
                    "destination": {"server": "https://kubernetes.default.svc"}}}}});
    if let Some(patch) = patch {
        object["spec"]["templatePatch"] = json!(patch);
    }
    object
}

#[test]
fn application_set_templates_are_read_as_applications_unless_templated() {
    let off = application_set(&serial(false), None);
    let (allowed, text) = validate(&off);
    assert!(
        !allowed && text.contains(DENIED) && text.contains("spec.template.spec.source.helm.values"),
        "{text}"
    );
    let found = items(&check(&[off]));
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(DENIED)),
        "{found:#?}"
    );
    let missing = application_set("cloudConfig:\n  global:\n    region: r\n", None);
    assert!(
        patches(&missing),
        "a missing setting is written into the template"
    );
    // Template syntax anywhere in the template: every Application may differ; named.
    let templated = application_set(
        &format!("{}cluster:\n  name: '{{{{cluster}}}}'\n", serial(false)),
        None,
    );
    let (allowed, text) = validate(&templated);
    assert!(
        allowed && text.contains("spec.template") && text.contains("ApplicationSet controller"),
        "{text}"
    );
    let (allowed, text) = validate(&application_set(&serial(false), Some("spec: {}\n")));
    assert!(allowed && text.contains("spec.templatePatch"), "{text}");
}

#[test]
fn sveltos_and_fleet_values_are_read_and_their_other_sources_named() {
    let profile = |values: &str| {
        json!({"apiVersion": "config.projectsveltos.io/v1beta1", "kind": "ClusterProfile",
            "metadata": {"name": "occm"},
            "spec": {"helmCharts": [{"repositoryURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "repositoryName": "cpo", "chartName": format!("cpo/{CHART}"), "chartVersion": "2.31.1",
                "releaseName": "occm", "releaseNamespace": "kube-system", "helmChartAction": "Install",
                "values": values}]}})
    };
    let off = profile(&serial(false));
    let (allowed, text) = validate(&off);
    assert!(!allowed && text.contains(DENIED), "{text}");
    assert!(
        items(&check(&[off]))
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(DENIED))
    );
    let templated = profile(&format!(
        "{}cluster:\n  name: {{{{ .Cluster.metadata.name }}}}\n",
        serial(false)
    ));
    let (allowed, text) = validate(&templated);
    assert!(
        allowed && text.contains("a Go template Sveltos renders"),
        "{text}"
    );
    let helm_op = |extra: Value| {
        let mut object = json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "HelmOp",
            "metadata": {"name": "occm", "namespace": "fleet-default"},
            "spec": {"helm": {"chart": CHART, "version": "2.31.1",
                "repo": "https://kubernetes.github.io/cloud-provider-openstack",
                "values": {"cloudConfig": {"global": {"region": "r"},
                    "loadBalancer": {"provider-requires-serial-api-calls": false}}}}}});
        for (k, v) in extra.as_object().expect("map") {
            object["spec"]["helm"][k] = v.clone();
        }
        object
    };
    let (allowed, text) = validate(&helm_op(json!({})));
    assert!(
        !allowed && text.contains(DENIED) && text.contains("spec.helm.values"),
        "{text}"
    );
    let (allowed, text) = validate(&helm_op(
        json!({"valuesFrom": [{"configMapKeyRef": {"name": "v", "key": "values.yaml"}}]}),
    ));
    assert!(
        allowed
            && text.contains("values come from ConfigMap v key values.yaml (spec.helm.valuesFrom)"),
        "{text}"
    );
    // A fleet.yaml, read by check.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("fleet.yaml"),
        format!("defaultNamespace: kube-system\nhelm:\n  chart: {CHART}\n  version: 2.31.1\n  values:\n    cloudConfig:\n      loadBalancer:\n        provider-requires-serial-api-calls: false\n"),
    )
    .expect("write");
    let argv = ["check".to_owned(), dir.path().display().to_string()];
    let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args);
    let report = check::check(&options, &engine(), &mut std::io::empty()).expect("check runs");
    let found = items(&report);
    assert!(
        found
            .iter()
            .any(|(l, _, m)| *l == Level::Error && m.contains(DENIED) && m.contains("helm.values")),
        "{found:#?}"
    );
}
