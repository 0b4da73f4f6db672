//! The upstream `openstack-cloud-controller-manager` chart at each generation (issue 33 item
//! 1): a delivery that pins a chart version is read as that version's templates read its
//! values, and one that pins none is read as every generation, denied only when every reading
//! is. Each boundary goes through the validating and mutating webhook (`admission::handle`) and
//! through `stackgate check`.
//!
//! Facts (kubernetes/cloud-provider-openstack, `charts/openstack-cloud-controller-manager/
//! templates/_helpers.tpl` and `secret.yaml` at each tag; `src/sites/generation.rs`), checked
//! with Helm v3.17.2 on the chart at 1.3.0, 2.27.6, 2.29.3 and 2.36.0:
//! - 1.0.0–1.3.0 and 2.24.0 write values unquoted (a line break in a value writes a line of
//!   its own) and never read `cloudConfigContents`;
//! - before 2.28.0-alpha.5 `secret.enabled` is not read: the Secret is rendered and mounted;
//! - `[Route]` is rendered from 2.29.2 and 2.30.0 on, not at 2.29.3.

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
    in_process::respond(webhook, object, "chart-generations")
}

/// The validating webhook's answer for a CREATE of `object`: (allowed, message and warnings).
fn validate(object: &Value) -> (bool, String) {
    in_process::validate(object, "chart-generations")
}

/// The mutating webhook's patch applied to `object` (None when there is no patch).
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

/// `stackgate check` of `manifest` (YAML on stdin): the findings as (level, rule, message).
fn check_items(manifest: &str) -> Vec<(Level, String, String)> {
    let options = CheckOptions::from(
        &Cmd::try_parse_from(["check", "-"])
            .expect("valid flags")
            .args,
    );
    let report: Report =
        check::check(&options, &engine(), &mut manifest.as_bytes()).expect("check runs");
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .map(|i| (i.level, i.rule.clone(), i.message.clone()))
        .collect()
}

fn check_denies(manifest: &str) -> bool {
    check_items(manifest)
        .iter()
        .any(|(level, _, _)| *level == Level::Error)
}

/// A Flux HelmRelease of the chart at `version` (none when None) with `values`.
fn helm_release(version: Option<&str>, values: Value) -> Value {
    let mut spec = json!({"chart": CHART, "sourceRef": {"kind": "HelmRepository", "name": "cpo"}});
    if let Some(version) = version {
        spec["version"] = json!(version);
    }
    json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"interval": "5m", "chart": {"spec": spec}, "values": values}})
}

/// An RKE2/k3s HelmChart of the chart at `version` with a `valuesContent` string.
fn helm_chart(version: &str, values: &str) -> Value {
    json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"chart": CHART, "version": version,
            "repo": "https://kubernetes.github.io/cloud-provider-openstack",
            "valuesContent": values}})
}

/// An Argo CD Application of the chart at `version` with a `valuesObject`.
fn application(version: &str, values: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {"project": "default",
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "kube-system"},
            "source": {"repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "chart": CHART, "targetRevision": version,
                "helm": {"valuesObject": values}}}})
}

/// The object as a manifest `check` reads (JSON is YAML).
fn yaml(object: &Value) -> String {
    serde_json::to_string_pretty(object).expect("JSON")
}

fn serial(value: Value) -> Value {
    json!({"loadBalancer": {"provider-requires-serial-api-calls": value}})
}

#[test]
fn secret_enabled_false_is_ignored_before_2_28_0_alpha_5() {
    let values = json!({"secret": {"enabled": false}, "cloudConfig": serial(json!(false))});
    for version in ["2.27.6", "2.28.0-alpha.4", "1.3.0", "2.24.0"] {
        let object = helm_release(Some(version), values.clone());
        let (allowed, text) = validate(&object);
        assert!(
            !allowed,
            "{version}: the Secret is rendered and mounted: {text}"
        );
        assert!(check_denies(&yaml(&object)), "{version}: check");
    }
    for version in ["2.28.0-alpha.5", "2.28.0", "2.29.3", "2.36.0"] {
        let object = helm_release(Some(version), values.clone());
        let (allowed, text) = validate(&object);
        assert!(allowed, "{version}: no Secret is rendered: {text}");
        assert!(
            !text.contains("provider-requires-serial-api-calls"),
            "{version}: {text}"
        );
        assert!(!check_denies(&yaml(&object)), "{version}: check");
    }
    // No version: some versions render it, some do not. Not denied, and said.
    let object = helm_release(None, values);
    let (allowed, text) = validate(&object);
    assert!(allowed, "{text}");
    assert!(text.contains("Fix: pin the chart version, or"), "{text}");
    assert!(mutated(&object).is_none(), "nothing is fixed on a guess");
    let items = check_items(&yaml(&object));
    assert!(
        items.iter().any(|(l, _, m)| *l == Level::Warning
            && m.contains("pin the chart version")
            && m.contains("only chart versions before 2.28.0-alpha.5 render this config")),
        "{items:?}"
    );
}

#[test]
fn old_charts_read_cloud_config_not_cloud_config_contents() {
    // The serial setting is in cloudConfigContents only.
    let values = "cloudConfigContents: |\n  [LoadBalancer]\n  provider-requires-serial-api-calls = true\n\
                  cloudConfig:\n  global:\n    region: r\n";
    for version in ["1.0.0", "1.3.0", "2.24.0"] {
        let object = helm_chart(version, values);
        // A missing setting is a warning, and the mutating webhook adds it.
        let (_, text) = validate(&object);
        assert!(
            // Line 4 of the values is `cloudConfig:` (lines 1–3 are `cloudConfigContents`).
            text.contains("spec.valuesContent line 4: ") && text.contains("is not set"),
            "{version}: cloudConfig is what the chart renders: {text}"
        );
        // The fix edits what this generation reads, and holds.
        let fixed = mutated(&object).expect("a fix");
        let fixed_values = fixed["spec"]["valuesContent"].as_str().expect("a string");
        assert!(
            fixed_values.contains("loadBalancer:\n    provider-requires-serial-api-calls: true"),
            "{version}: {fixed_values}"
        );
        let (allowed, text) = validate(&fixed);
        assert!(allowed && !text.contains("is not set"), "{version}: {text}");
        let items = check_items(&yaml(&object));
        assert!(
            items
                .iter()
                .any(|(_, _, m)| m.contains("cloudConfig") && m.contains("is not set")),
            "{version}: check: {items:?}"
        );
    }
    for version in ["1.4.0", "2.25.0", "2.36.0"] {
        let object = helm_chart(version, values);
        let (allowed, text) = validate(&object);
        assert!(
            allowed && !text.contains("is not set"),
            "{version}: cloudConfigContents is rendered: {text}"
        );
        assert!(mutated(&object).is_none(), "{version}");
        let items = check_items(&yaml(&object));
        assert!(
            !items.iter().any(|(_, _, m)| m.contains("is not set")),
            "{version}: check: {items:?}"
        );
    }
}

#[test]
fn an_unpinned_version_is_denied_when_every_generation_is_and_every_reading_is_fixed() {
    // Both readings miss the setting: both are fixed, each where it is read.
    let values = json!({
        "cloudConfigContents": "[Global]\nregion = r\n",
        "cloudConfig": {"global": {"region": "r"}},
    });
    let object = helm_release(None, values);
    let (_, text) = validate(&object);
    assert_eq!(
        text.matches("is not set").count(),
        2,
        "each reading: {text}"
    );
    let fixed = mutated(&object).expect("a fix");
    assert_eq!(
        fixed["spec"]["values"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"],
        json!(true)
    );
    assert!(
        fixed["spec"]["values"]["cloudConfigContents"]
            .as_str()
            .is_some_and(|c| c.contains("provider-requires-serial-api-calls = true")),
        "{fixed}"
    );
    let (allowed, text) = validate(&fixed);
    assert!(
        allowed && !text.contains("is not set"),
        "the fix holds for every generation: {text}"
    );
    // Every reading holds a false value: denied, by both faces.
    let values = json!({
        "cloudConfigContents": "[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
        "cloudConfig": serial(json!(false)),
    });
    let object = helm_release(None, values);
    assert!(!validate(&object).0);
    assert!(check_denies(&yaml(&object)));
    // Only one reading holds a false value: a warning that asks to pin the version.
    let values = json!({
        "cloudConfigContents": "[LoadBalancer]\nprovider-requires-serial-api-calls = true\n",
        "cloudConfig": serial(json!(false)),
    });
    let object = helm_release(None, values);
    let (allowed, text) = validate(&object);
    assert!(allowed, "{text}");
    assert!(text.contains("Fix: pin the chart version, or"), "{text}");
    assert!(!check_denies(&yaml(&object)));
}

#[test]
fn an_unquoted_line_break_writes_a_line_and_is_not_fixed_by_a_key() {
    let injected = "subnet-id: \"s\\nprovider-requires-serial-api-calls = false\"";
    let values = format!(
        "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: true\n    {injected}\n"
    );
    let object = helm_chart("2.24.0", &values);
    let (allowed, text) = validate(&object);
    assert!(!allowed, "the injected line is read last: {text}");
    assert!(check_denies(&yaml(&object)));
    // Quoted from 2.25.0 on: the line break stays inside the value.
    let (allowed, text) = validate(&helm_chart("2.25.0", &values));
    assert!(allowed, "{text}");
    // A line written by a value is not undone by setting a key: no fix, and it says why.
    let values = "cloudConfig:\n  loadBalancer:\n    subnet-id: \"s\\nlb-method = ROUND_ROBIN\"\n";
    let object = helm_chart("2.24.0", values);
    assert!(validate(&object).1.contains("is not set"));
    assert!(mutated(&object).is_none(), "validated only");
    let items = check_items(&yaml(&object));
    assert!(
        items
            .iter()
            .any(|(_, _, m)| m.contains("holds a line break")),
        "{items:?}"
    );
    assert!(
        mutated(&helm_chart("2.25.0", values)).is_some(),
        "quoted: fixed"
    );
}

#[test]
fn a_scalar_route_renders_before_route_existed() {
    let values = json!({"cloudConfig": {
        "loadBalancer": {"provider-requires-serial-api-calls": true},
        "route": "x"}});
    for version in ["2.29.3", "2.29.1", "2.27.6", "1.3.0"] {
        let object = application(version, values.clone());
        let (allowed, text) = validate(&object);
        assert!(
            allowed,
            "{version}: no [Route], the value is never read: {text}"
        );
        assert!(!check_denies(&yaml(&object)), "{version}: check");
    }
    for version in ["2.29.2", "2.30.0", "2.36.0"] {
        let object = application(version, values.clone());
        let (allowed, text) = validate(&object);
        assert!(!allowed, "{version}: the chart cannot render it: {text}");
        assert!(check_denies(&yaml(&object)), "{version}: check");
    }
}

/// `stackgate check` of a values file at `rel` (with `files` beside it) under `values_for`:
/// whether it denies.
fn check_values_file_denies(files: &[(&str, &str)], values_for: &str) -> bool {
    let dir = tempfile::tempdir().expect("tempdir");
    for (rel, text) in files {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let root = dir.path().to_str().expect("UTF-8").to_owned();
    let options = CheckOptions::from(
        &Cmd::try_parse_from(["check", &root, "--values-for", values_for])
            .expect("valid flags")
            .args,
    );
    let report: Report = check::check(&options, &engine(), &mut "".as_bytes()).expect("runs");
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .any(|i| i.level == Level::Error)
}

/// A values file is read as the chart version `--values-for CHART@VERSION` names (issue 33
/// item 1 follow-up), and an umbrella's values file as the version its `Chart.yaml`
/// dependency pins; without one, as every generation.
#[test]
fn values_files_are_read_as_the_version_values_for_or_the_umbrella_pins() {
    let values = "secret: {enabled: false}\ncloudConfig:\n  loadBalancer:\n    \
                  provider-requires-serial-api-calls: false\n";
    let file = [("values.yaml", values)];
    assert!(check_values_file_denies(
        &file,
        &format!("{CHART}@2.27.6=values.yaml")
    ));
    assert!(!check_values_file_denies(
        &file,
        &format!("{CHART}@2.36.0=values.yaml")
    ));
    // Unpinned: some generations render it, some do not: a warning, not a denial.
    assert!(!check_values_file_denies(
        &file,
        &format!("{CHART}=values.yaml")
    ));
    let umbrella = |version: &str| {
        format!(
            "apiVersion: v2\nname: platform\nversion: 1.0.0\ndependencies:\n- name: {CHART}\n  \
             version: \"{version}\"\n  repository: https://kubernetes.github.io/cloud-provider-openstack\n"
        )
    };
    let sub = format!(
        "{CHART}:\n{}",
        values
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    for (version, denied) in [("2.27.6", true), ("2.36.0", false), ("~2.27.0", false)] {
        let chart = umbrella(version);
        let files = [
            ("Chart.yaml", chart.as_str()),
            ("values.yaml", sub.as_str()),
        ];
        assert_eq!(
            check_values_file_denies(&files, &format!("{CHART}=values.yaml")),
            denied,
            "dependency version {version}"
        );
    }
}
