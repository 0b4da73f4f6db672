//! The values pipeline as Helm and each GitOps controller compute it (issues 22 and 23): every
//! way around the serial-calls policy found by trying the controllers' own argument building
//! is denied by the webhook (`/validate`, an AdmissionReview as the apiserver sends it) and by
//! `stackgate check`, and hostile `--set` shapes get an answer, never a crash.

#[path = "support/in_process.rs"]
mod in_process;

use clap::Parser;
use serde_json::{Value, json};
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::report::{Level, Report};

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn engine() -> Engine {
    in_process::engine()
}

/// The validating webhook's answer for a CREATE of `object`: (allowed, message and warnings).
fn validate(object: &Value) -> (bool, String) {
    in_process::validate(object, "values-pipeline")
}

/// `stackgate check -` over `text`.
fn check_report(text: &str) -> Report {
    let options = CheckOptions::from(
        &Cmd::try_parse_from(["check", "-"])
            .expect("valid flags")
            .args,
    );
    check::check(&options, &engine(), &mut text.as_bytes()).expect("check runs")
}

/// The findings of `check` over `object` written as YAML (JSON is YAML).
fn check_items(object: &Value) -> Vec<(Level, String, String)> {
    items_of(&check_report(
        &serde_json::to_string_pretty(object).expect("encode"),
    ))
}

/// A report's findings as (level, rule, message).
fn items_of(report: &Report) -> Vec<(Level, String, String)> {
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .map(|i| (i.level, i.rule.clone(), i.message.clone()))
        .collect()
}

/// Both faces deny `object` for the serial-calls policy.
fn denied_for_serial_calls(object: &Value) {
    let (allowed, message) = validate(object);
    assert!(!allowed, "the webhook admitted it: {message}");
    assert!(
        message.contains("provider-requires-serial-api-calls"),
        "{message}"
    );
    let items = check_items(object);
    assert!(
        items
            .iter()
            .any(|(level, rule, _)| *level == Level::Error && rule == "serial-lb-api-calls"),
        "check did not deny it: {items:?}"
    );
}

/// Both faces admit `object` without a serial-calls denial.
fn admitted(object: &Value) {
    let (allowed, message) = validate(object);
    assert!(allowed, "the webhook denied it: {message}");
    let items = check_items(object);
    assert!(
        !items.iter().any(|(level, _, _)| *level == Level::Error),
        "check denied it: {items:?}"
    );
}

fn helm_chart(set: Value) -> Value {
    json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"chart": "openstack-cloud-controller-manager", "set": set}})
}

fn argo_application(parameters: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {"project": "default",
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "kube-system"},
            "source": {"repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "chart": "openstack-cloud-controller-manager", "targetRevision": "2.31.1",
                "helm": {"parameters": parameters}}}})
}

const SERIAL: &str = "cloudConfig.loadBalancer.provider-requires-serial-api-calls";

#[test]
fn helm_applies_set_string_after_set_whatever_the_key_order() {
    // helm-controller passes "off" as --set-string and "true" as --set; the escaped spelling
    // (`cloud\Config`: `\` sorts after `C`) comes later in its sorted arguments, but Helm
    // applies every --set before every --set-string: the CCM reads `off`.
    let escaped = SERIAL.replacen("cloudConfig", "cloud\\Config", 1);
    denied_for_serial_calls(&helm_chart(json!({SERIAL: "off", escaped.clone(): "true"})));
    // The plain order says the same.
    denied_for_serial_calls(&helm_chart(json!({SERIAL: "off"})));
    // And the other way round is fine: typed true last wins only when it is a --set-string.
    admitted(&helm_chart(json!({SERIAL: "true"})));
}

#[test]
fn a_second_assignment_hidden_in_another_key_is_applied_in_helms_order() {
    // `zzz=1,<serial>` with "true" is one --set argument that sets the serial key too; the
    // plain key with "off" is a --set-string, applied after it.
    let hidden = format!("zzz=1,{SERIAL}");
    denied_for_serial_calls(&helm_chart(json!({SERIAL: "off", hidden.clone(): "true"})));
    // With "false" typed on the plain key and "true" hidden: both --set, sorted keys, the
    // hidden one (`z…`) last: true.
    admitted(&helm_chart(json!({SERIAL: "false", hidden: "true"})));
}

#[test]
fn helm_controller_types_true_false_and_null_in_any_case() {
    // "FALSE" is typed by helm-controller (it lowercases): --set, applied before the
    // --set-string "true" of the escaped key. Helm renders true.
    let escaped = SERIAL.replacen("cloudConfig", "cloud\\Config", 1);
    admitted(&helm_chart(
        json!({SERIAL: "FALSE", escaped.clone(): "true"}),
    ));
    // And "TRUE" typed before a --set-string "no" of the escaped key: no wins.
    denied_for_serial_calls(&helm_chart(json!({SERIAL: "TRUE", escaped: "no"})));
}

#[test]
fn argo_force_string_parameters_come_after_the_typed_ones() {
    // forceString "false" listed before a typed "true" of the same name: Argo CD passes
    // --set name=true and --set-string name=false; Helm applies the string last.
    denied_for_serial_calls(&argo_application(json!([
        {"name": SERIAL, "value": "false", "forceString": true},
        {"name": SERIAL, "value": "true"}
    ])));
    // The same two the other way round end the same way.
    denied_for_serial_calls(&argo_application(json!([
        {"name": SERIAL, "value": "true"},
        {"name": SERIAL, "value": "false", "forceString": true}
    ])));
    // A later parameter of the same name and kind replaces an earlier one (Argo CD keeps
    // them in a map by name).
    admitted(&argo_application(json!([
        {"name": SERIAL, "value": "false"},
        {"name": SERIAL, "value": "true"}
    ])));
}

#[test]
fn typed_values_fold_case_as_go_does() {
    // Helm's typedVal uses strings.EqualFold: `falſe` (long s) is the boolean false.
    denied_for_serial_calls(&argo_application(json!([
        {"name": SERIAL, "value": "fal\u{17F}e"}
    ])));
}

/// Runs `f` on a thread with a 2 MiB stack (a tokio worker's), as the server does.
fn on_a_worker_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("no crash")
}

#[test]
fn thousands_of_list_indexes_are_a_finding_not_a_crash() {
    // Issue 22: `cloudConfig.x` + `[0]` x 7,500 (a 30 KB object) overflowed the stack.
    let name = format!("cloudConfig.x{}", "[0]".repeat(7_500));
    let (allowed, message) = on_a_worker_stack({
        let object = argo_application(json!([{"name": name, "value": "1"}]));
        move || validate(&object)
    });
    assert!(!allowed, "{message}");
    assert!(message.contains("over stackgate's limit"), "{message}");
    assert!(message.contains("128 keys and list indexes"), "{message}");
    // YAML limits implicit keys to 1024 characters: an explicit `? key`.
    let text = format!(
        "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: occm\n  \
         namespace: kube-system\nspec:\n  chart: openstack-cloud-controller-manager\n  set:\n    \
         ? {name}\n    : \"1\"\n"
    );
    let items = on_a_worker_stack(move || items_of(&check_report(&text)));
    assert!(
        items
            .iter()
            .any(|(level, _, m)| *level == Level::Error && m.contains("over stackgate's limit")),
        "{items:?}"
    );
}

#[test]
fn list_values_count_against_the_values_budget() {
    // Issue 22: a `{,,,…}` value of 3 million empty elements cost 237 MiB. Past the budget of
    // 100,000 keys and elements it is one finding.
    let value = format!("{{{}}}", ",".repeat(200_000));
    let object = argo_application(json!([{"name": "cloudConfig.global.x", "value": value}]));
    let (allowed, message) = validate(&object);
    assert!(!allowed, "{message}");
    assert!(
        message.contains("100000 keys and list elements"),
        "{message}"
    );
    // At the budget it is read (and is no cloud-config key the chart renders as a denial).
    let value = format!("{{{}}}", ",".repeat(1_000));
    let object = argo_application(json!([
        {"name": "cloudConfig.global.x", "value": value},
        {"name": SERIAL, "value": "true"}
    ]));
    let (_, message) = validate(&object);
    assert!(!message.contains("over stackgate's limit"), "{message}");
}

/// Both faces admit `object` with a warning that says which values source they cannot see.
fn unseen(object: &Value, source: &str) {
    let (allowed, message) = validate(object);
    assert!(allowed, "{message}");
    assert!(
        message.contains("which this run cannot see") && message.contains(source),
        "{message}"
    );
    let items = check_items(object);
    assert!(
        items.iter().any(|(level, _, m)| *level == Level::Warning
            && m.contains("which this run cannot see")
            && m.contains(source)),
        "{items:?}"
    );
    assert!(
        !items.iter().any(|(level, _, _)| *level == Level::Error),
        "{items:?}"
    );
}

#[test]
fn argo_file_parameters_that_set_the_cloud_config_are_unseen() {
    let mut object = argo_application(json!([{"name": SERIAL, "value": "true"}]));
    object["spec"]["source"]["helm"]["fileParameters"] =
        json!([{"name": "cloudConfigContents", "path": "files/cloud.conf"}]);
    unseen(&object, "cloudConfigContents from files/cloud.conf");
    // A file parameter for something else is no cloud-config source.
    object["spec"]["source"]["helm"]["fileParameters"] =
        json!([{"name": "extraVolumes[0].configMap", "path": "files/x"}]);
    admitted(&object);
    let (_, message) = validate(&object);
    assert!(!message.contains("cannot see"), "{message}");
}

#[test]
fn flux_chart_values_files_are_unseen() {
    let object = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager",
            "sourceRef": {"kind": "HelmRepository", "name": "cpo"},
            "valuesFiles": ["values.yaml", "values-prod.yaml"]}},
            "values": {"cloudConfig": {"global": {"auth-url": "https://k"}}}}});
    unseen(
        &object,
        "values files values.yaml, values-prod.yaml of the chart source",
    );
    let mut single = object.clone();
    single["spec"]["chart"]["spec"]
        .as_object_mut()
        .expect("map")
        .remove("valuesFiles");
    single["spec"]["chart"]["spec"]["valuesFile"] = json!("values-prod.yaml");
    unseen(&single, "values file values-prod.yaml of the chart source");
}

#[test]
fn chart_references_in_other_spellings_are_the_ccm_chart() {
    for chart in [
        "https://github.com/o/r/raw/main/openstack-cloud-controller-manager-2.31.1.tgz?raw=true",
        "https://example/openstack-cloud-controller-manager-2.31.1.tgz#frag",
        "https://example/openstack-cloud-controller-manager-2.31.1.TGZ",
        "https://example/openstack-cloud-controller-manager-v2.31.1.tgz",
    ] {
        let mut object = helm_chart(json!({SERIAL: "false"}));
        object["spec"]["chart"] = json!(chart);
        denied_for_serial_calls(&object);
    }
    // An Argo CD path that ends in `/.`.
    let mut object = argo_application(json!([{"name": SERIAL, "value": "false"}]));
    let source = object["spec"]["source"].as_object_mut().expect("map");
    source.remove("chart");
    source.insert(
        "path".to_owned(),
        json!("charts/openstack-cloud-controller-manager/."),
    );
    denied_for_serial_calls(&object);
}

/// The umbrella's values with the CCM subchart's serial key false, in YAML spellings a line
/// scan for `openstack-cloud-controller-manager:` misses.
const UMBRELLA_SPELLINGS: &[&str] = &[
    "\"openstack-cloud-controller-manager\":\n  cloudConfig:\n    loadBalancer:\n      provider-requires-serial-api-calls: false\n",
    "{openstack-cloud-controller-manager: {cloudConfig: {loadBalancer: {provider-requires-serial-api-calls: false}}}}\n",
    "  openstack-cloud-controller-manager:\n    cloudConfig:\n      loadBalancer:\n        provider-requires-serial-api-calls: false\n",
    "? openstack-cloud-controller-manager\n: cloudConfig:\n    loadBalancer:\n      provider-requires-serial-api-calls: false\n",
    "name: &n openstack-cloud-controller-manager\n*n : {cloudConfig: {loadBalancer: {provider-requires-serial-api-calls: false}}}\n",
    "!!str openstack-cloud-controller-manager: {cloudConfig: {loadBalancer: {provider-requires-serial-api-calls: false}}}\n",
    "\"openstack-cloud-controller-\\x6danager\": {cloudConfig: {loadBalancer: {provider-requires-serial-api-calls: false}}}\n",
];

#[test]
fn umbrella_keys_in_every_yaml_spelling_are_read() {
    for values in UMBRELLA_SPELLINGS {
        let chart = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "platform", "namespace": "kube-system"},
            "spec": {"chart": "example/platform", "valuesContent": values}});
        denied_for_serial_calls(&chart);
        let mut argo = argo_application(json!([]));
        let source = &mut argo["spec"]["source"];
        source["chart"] = json!("platform");
        source["helm"] = json!({"values": values});
        denied_for_serial_calls(&argo);
        let k0s = json!({"apiVersion": "k0s.k0sproject.io/v1beta1", "kind": "ClusterConfig",
            "metadata": {"name": "k0s", "namespace": "kube-system"},
            "spec": {"extensions": {"helm": {"charts": [{"name": "platform",
                "chartname": "example/platform", "namespace": "kube-system",
                "values": values}]}}}});
        denied_for_serial_calls(&k0s);
    }
    // Switched off, the subchart renders nothing.
    let off = "openstack-cloud-controller-manager: {enabled: false, cloudConfig: {loadBalancer: {provider-requires-serial-api-calls: false}}}\n";
    let chart = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "platform", "namespace": "kube-system"},
        "spec": {"chart": "example/platform", "valuesContent": off}});
    admitted(&chart);
}

#[test]
fn an_umbrella_values_string_padded_past_the_cap_is_over_the_limit_not_silent() {
    // Issue 22/23: an umbrella's values string over the 64 KiB values-text cap is not parsed;
    // padding must not hide the CCM subchart's `false` from the check.
    let padding = "# padding\n".repeat(8_000);
    let values = format!(
        "{padding}openstack-cloud-controller-manager:\n  cloudConfig:\n    loadBalancer:\n      provider-requires-serial-api-calls: false\n"
    );
    let chart = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "platform", "namespace": "kube-system"},
        "spec": {"chart": "example/platform", "valuesContent": values}});
    let (allowed, text) = validate(&chart);
    assert!(!allowed, "{text}");
    assert!(text.contains("over stackgate's limit"), "{text}");
    // Another chart's large values that never name the CCM chart stay none of its business.
    let other = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "dashboards", "namespace": "monitoring"},
        "spec": {"chart": "example/dashboards", "valuesContent": padding}});
    admitted(&other);
}

#[test]
fn a_helm_chart_config_named_after_another_helm_chart_is_read_by_its_values() {
    // Issue 23 item 6: HelmChart `occm` installs the CCM chart; its HelmChartConfig `occm`
    // is all the webhook sees. Values with the chart's own top-level keys are its values.
    for values in [
        "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false\n",
        "\"cloud\\x43onfig\": {loadBalancer: {provider-requires-serial-api-calls: false}}\n",
    ] {
        let config = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"valuesContent": values}});
        denied_for_serial_calls(&config);
    }
    // Another chart's HelmChartConfig stays none of stackgate's business.
    let other = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
        "metadata": {"name": "rke2-ingress-nginx", "namespace": "kube-system"},
        "spec": {"valuesContent": "controller:\n  replicaCount: 2\n"}});
    admitted(&other);
    let (_, message) = validate(&other);
    assert!(message.is_empty(), "{message}");
}

#[test]
fn argo_parameters_that_set_the_same_value_are_read_in_every_order_helm_may_get() {
    // Two --set parameters of different names set the same key (`\s` is `s`); Argo CD hands
    // them to Helm from a Go map, in random order: either value may win.
    let escaped = SERIAL.replace("calls", "call\\s");
    for parameters in [
        json!([{"name": SERIAL, "value": "false"}, {"name": escaped, "value": "true"}]),
        json!([{"name": SERIAL, "value": "true"}, {"name": escaped, "value": "false"}]),
    ] {
        denied_for_serial_calls(&argo_application(parameters));
    }
    // Both true: admitted.
    admitted(&argo_application(json!([
        {"name": SERIAL, "value": "true"}, {"name": escaped, "value": "true"}
    ])));
}

#[test]
fn helm_chart_structured_values_are_merged_over_values_content() {
    // helm-controller mounts `spec.values` as a values file after `spec.valuesContent`'s.
    let serial = |v: bool| json!({"cloudConfig": {"loadBalancer": {"provider-requires-serial-api-calls": v}}});
    let mut object = helm_chart(json!({}));
    object["spec"]["values"] = serial(false);
    denied_for_serial_calls(&object);
    object["spec"]["valuesContent"] =
        json!("cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: true\n");
    denied_for_serial_calls(&object);
    // The other way round, spec.values decides: true.
    object["spec"]["values"] = serial(true);
    object["spec"]["valuesContent"] =
        json!("cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false\n");
    admitted(&object);
    // spec.set still wins over both.
    object["spec"]["set"] = json!({SERIAL: "false"});
    denied_for_serial_calls(&object);
}

#[test]
fn an_assignment_hidden_in_an_umbrella_charts_set_key_is_scoped_to_the_subchart() {
    // An umbrella chart's `spec.set` key with a second assignment hidden in it: Helm parses
    // the whole `--set` entry at the umbrella's root, so both assignments land under the
    // subchart key. With `false` hidden in a key that sorts after the plain `true` one (both
    // typed: --set, in helm-controller's sorted order), the CCM reads false.
    let sub = "openstack-cloud-controller-manager";
    let plain = format!("{sub}.{SERIAL}");
    let hidden = format!("{sub}.zzz=1,{sub}.{SERIAL}");
    // The values string beneath spells the subchart key bare, quoted or in flow style.
    for values in [
        format!("{sub}:\n  cloudConfig:\n    global:\n      auth-url: https://keystone:5000/v3\n"),
        format!(
            "\"{sub}\": {{cloudConfig: {{global: {{auth-url: 'https://keystone:5000/v3'}}}}}}\n"
        ),
    ] {
        let umbrella = |set: Value| {
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
                "metadata": {"name": "platform", "namespace": "kube-system"},
                "spec": {"chart": "example/platform", "valuesContent": values, "set": set}})
        };
        denied_for_serial_calls(&umbrella(
            json!({plain.clone(): "true", hidden.clone(): "false"}),
        ));
        // A `--set-string` "off" hidden the same way counts too.
        denied_for_serial_calls(&umbrella(json!({hidden.clone(): "off"})));
        // And the other way round: the hidden `TRUE` (typed by helm-controller, which
        // lowercases) is the last word over a plain false.
        admitted(&umbrella(
            json!({plain.clone(): "false", hidden.clone(): "TRUE"}),
        ));
    }
}
