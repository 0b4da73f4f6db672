//! Values read exactly as Helm reads them (issue 33 items 2 and 6), in every place a values
//! text reaches the chart: RKE2/k3s HelmChart `valuesContent`, Argo CD `helm.values`, a Flux
//! HelmRelease's `spec.values` written in a manifest and its `valuesFrom` ConfigMap, a
//! labelled values ConfigMap and a plain values file. Each case goes through the validating
//! and mutating webhook (`admission::handle`, the AdmissionReview the apiserver sends) and
//! through `stackgate check`.
//!
//! The facts, checked with Helm v3.17.2 (`helm template` of a chart printing
//! `toYaml .Values`, and of the real `openstack-cloud-controller-manager` chart 2.36.0):
//! - go-yaml v2 applies a merge key (`<<`) where it is written: after an explicit key it
//!   overwrites it, before one it is overwritten (go-yaml/yaml v2 7649d454, decode.go
//!   `mapping` l.661-664, `merge` l.786-811).
//! - a values text is its first YAML document (`yaml.Unmarshal` decodes one document); what
//!   follows a `---` or `...` is never read, even when it is not valid YAML.
//! - a section given as an empty list or map renders as an empty section; a list renders one
//!   `<index> = "<item>"` line per item (which the CCM's gcfg refuses); a scalar section stops
//!   the chart (`range can't iterate over …`).

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
    in_process::respond(webhook, object, "helm-values-exact")
}

/// The validating webhook's answer for a CREATE of `object`: (allowed, message and warnings).
fn validate(object: &Value) -> (bool, String) {
    in_process::validate(object, "helm-values-exact")
}

/// `object` with the mutating webhook's patch applied (unchanged when there is none).
fn mutated(object: &Value) -> Value {
    let response = respond(Webhook::Mutate, object);
    assert_eq!(response["allowed"], true, "mutate never denies: {response}");
    let mut out = object.clone();
    if let Some(patch) = response["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .expect("base64 patch");
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("JSON Patch");
        json_patch::patch(&mut out, &patch).expect("the patch applies");
    }
    out
}

fn options(argv: &[&str]) -> CheckOptions {
    let mut all = vec!["check"];
    all.extend_from_slice(argv);
    CheckOptions::from(&Cmd::try_parse_from(all).expect("valid flags").args)
}

/// `stackgate check` over `argv` with `stdin`.
fn check_run(argv: &[&str], stdin: &str) -> Report {
    check::check(&options(argv), &engine(), &mut stdin.as_bytes()).expect("check runs")
}

/// The findings of a report as (level, rule, message).
fn items_of(report: &Report) -> Vec<(Level, String, String)> {
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .map(|i| (i.level, i.rule.clone(), i.message.clone()))
        .collect()
}

/// Whether `check` denies (an error) for the serial-calls rule.
fn check_denies_serial(items: &[(Level, String, String)]) -> bool {
    items
        .iter()
        .any(|(level, rule, _)| *level == Level::Error && rule == "serial-lb-api-calls")
}

fn helm_chart(values: &str) -> Value {
    json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"chart": CHART, "repo": "https://kubernetes.github.io/cloud-provider-openstack",
            "version": "2.36.0", "valuesContent": values}})
}

fn argo_application(values: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {"project": "default",
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "kube-system"},
            "source": {"repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "chart": CHART, "targetRevision": "2.36.0",
                "helm": {"values": values}}}})
}

fn labelled_config_map(values: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "occm-values", "namespace": "kube-system",
            "labels": {"stackgate.dev/ccm-values": "values.yaml"}},
        "data": {"values.yaml": values}})
}

/// A Flux HelmRelease manifest whose `spec.values` are `values` (YAML, indented under it).
fn helm_release_manifest(values: &str) -> String {
    let mut text = format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: occm\n  \
         namespace: kube-system\nspec:\n  interval: 5m\n  chart:\n    spec:\n      chart: {CHART}\n      \
         sourceRef:\n        kind: HelmRepository\n        name: cpo\n  values:\n"
    );
    for line in values.lines() {
        text.push_str("    ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// A Flux HelmRelease reading `values` from a ConfigMap of the same run.
fn helm_release_values_from(values: &str) -> String {
    let mut text = format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: occm\n  \
         namespace: kube-system\nspec:\n  interval: 5m\n  chart:\n    spec:\n      chart: {CHART}\n      \
         sourceRef:\n        kind: HelmRepository\n        name: cpo\n  valuesFrom:\n  - kind: ConfigMap\n    \
         name: occm-values\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: occm-values\n  \
         namespace: kube-system\ndata:\n  values.yaml: |\n"
    );
    for line in values.lines() {
        text.push_str("    ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// `stackgate check` of `values` as a plain values file of the chart.
fn check_values_file(values: &str) -> Vec<(Level, String, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("values.yaml");
    std::fs::write(&path, values).expect("write values");
    let path = path.to_str().expect("UTF-8 path").to_owned();
    items_of(&check_run(
        &[&path, "--values-for", &format!("{CHART}=values.yaml")],
        "",
    ))
}

/// The webhook objects that carry a values text.
fn carriers(values: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("HelmChart valuesContent", helm_chart(values)),
        ("Application helm.values", argo_application(values)),
        ("labelled values ConfigMap", labelled_config_map(values)),
    ]
}

/// Every face and every place denies `values` for the serial-calls rule.
fn denied_everywhere(values: &str) {
    let items = items_of(&check_run(&["-"], &helm_release_manifest(values)));
    assert!(
        check_denies_serial(&items),
        "HelmRelease spec.values: {items:?}"
    );
    denied_in_every_values_text(values);
}

/// Every face and every place that holds `values` as a text denies it for the serial-calls
/// rule (a manifest's structured `spec.values` is not a text: it has no second document).
fn denied_in_every_values_text(values: &str) {
    for (what, object) in carriers(values) {
        let (allowed, message) = validate(&object);
        assert!(!allowed, "{what}: the webhook admitted it: {message}");
        assert!(message.contains(SERIAL), "{what}: {message}");
        let items = items_of(&check_run(
            &["-"],
            &serde_json::to_string(&object).expect("encode"),
        ));
        assert!(check_denies_serial(&items), "{what}: check: {items:?}");
    }
    let items = items_of(&check_run(&["-"], &helm_release_values_from(values)));
    assert!(check_denies_serial(&items), "Flux valuesFrom: {items:?}");
    let items = check_values_file(values);
    assert!(check_denies_serial(&items), "values file: {items:?}");
}

/// Every face and every place admits `values` with no error.
fn admitted_everywhere(values: &str) {
    let items = items_of(&check_run(&["-"], &helm_release_manifest(values)));
    assert!(
        !items.iter().any(|(level, _, _)| *level == Level::Error),
        "HelmRelease spec.values: {items:?}"
    );
    admitted_in_every_values_text(values);
}

/// Every face and every place that holds `values` as a text admits it with no error.
fn admitted_in_every_values_text(values: &str) {
    for (what, object) in carriers(values) {
        let (allowed, message) = validate(&object);
        assert!(allowed, "{what}: the webhook denied it: {message}");
        let items = items_of(&check_run(
            &["-"],
            &serde_json::to_string(&object).expect("encode"),
        ));
        assert!(
            !items.iter().any(|(level, _, _)| *level == Level::Error),
            "{what}: check: {items:?}"
        );
    }
    let items = items_of(&check_run(&["-"], &helm_release_values_from(values)));
    assert!(
        !items.iter().any(|(level, _, _)| *level == Level::Error),
        "Flux valuesFrom: {items:?}"
    );
    let items = check_values_file(values);
    assert!(
        !items.iter().any(|(level, _, _)| *level == Level::Error),
        "values file: {items:?}"
    );
}

const GLOBAL: &str =
    "  global:\n    auth-url: https://keystone.example:5000/v3\n    region: RegionOne\n";

#[test]
fn a_merge_key_after_an_explicit_true_turns_serial_calls_off() {
    // Helm renders `provider-requires-serial-api-calls = "false"`: the `<<` is read after the
    // explicit key and overwrites it.
    denied_everywhere(&format!(
        "serialOff: &off\n  {SERIAL}: false\ncloudConfig:\n{GLOBAL}  loadBalancer:\n    \
         {SERIAL}: true\n    <<: *off\n"
    ));
    // A list of mappings, the one that sets false first (it wins among the merged ones).
    denied_everywhere(&format!(
        "serialOff: &off\n  {SERIAL}: false\nother: &other\n  {SERIAL}: true\ncloudConfig:\n\
         {GLOBAL}  loadBalancer: {{{SERIAL}: true, <<: [*off, *other]}}\n"
    ));
    // A whole section merged over an explicit one.
    denied_everywhere(&format!(
        "base: &base\n  loadBalancer:\n    {SERIAL}: false\ncloudConfig:\n{GLOBAL}  loadBalancer:\n    \
         {SERIAL}: true\n  <<: *base\n"
    ));
}

#[test]
fn an_explicit_true_after_a_merge_key_stays_true() {
    // The explicit key is read after the `<<` and overwrites the merged `false`.
    admitted_everywhere(&format!(
        "serialOff: &off\n  {SERIAL}: false\ncloudConfig:\n{GLOBAL}  loadBalancer:\n    <<: *off\n    \
         {SERIAL}: true\n"
    ));
    // A merged `true` over an explicit `false`.
    admitted_everywhere(&format!(
        "serialOn: &on\n  {SERIAL}: true\ncloudConfig:\n{GLOBAL}  loadBalancer:\n    {SERIAL}: false\n    \
         <<: *on\n"
    ));
}

/// The values of a HelmChart after the mutating webhook, read as Helm reads them, and the
/// text; the patched object passes validation.
fn values_after_mutation(values: &str) -> (Value, String) {
    let patched = mutated(&helm_chart(values));
    let text = patched["spec"]["valuesContent"]
        .as_str()
        .expect("valuesContent stays a string");
    let read = stackgate::yaml::parse_one(text)
        .and_then(|n| n.to_json())
        .expect("the patched values are YAML");
    let (allowed, message) = validate(&patched);
    assert!(allowed, "the patched object is denied: {message}");
    (read, text.to_owned())
}

#[test]
fn the_fix_lands_where_helm_reads_it_when_a_merge_supplies_the_section() {
    // The section comes whole from a merge: the added key must not replace it (an explicit
    // `loadBalancer:` would hide every merged key) and must survive the merge.
    let values = format!(
        "base: &base\n  loadBalancer:\n    subnet-id: 7f3c\ncloudConfig:\n  <<: *base\n{GLOBAL}"
    );
    let (read, _) = values_after_mutation(&values);
    assert_eq!(
        read["cloudConfig"]["loadBalancer"],
        json!({SERIAL: true, "subnet-id": "7f3c"})
    );
    // The section is explicit, a merge key after it supplies the section's other keys.
    let values = format!(
        "lb: &lb\n  subnet-id: 7f3c\ncloudConfig:\n{GLOBAL}  loadBalancer:\n    floating-network-id: f1\n    \
         <<: *lb\n"
    );
    let (read, text) = values_after_mutation(&values);
    assert_eq!(
        read["cloudConfig"]["loadBalancer"],
        json!({SERIAL: true, "subnet-id": "7f3c", "floating-network-id": "f1"})
    );
    // One line added after the merge key, the rest of the text as written.
    assert_eq!(
        text,
        values.replace("<<: *lb\n", &format!("<<: *lb\n    {SERIAL}: true\n"))
    );
}

#[test]
fn a_values_text_is_read_as_its_first_document() {
    let on = format!("cloudConfig:\n{GLOBAL}  loadBalancer:\n    {SERIAL}: true\n");
    let off = format!("cloudConfig:\n{GLOBAL}  loadBalancer:\n    {SERIAL}: false\n");
    // A trailing `---`, a second document, even one that is not YAML: Helm reads the first.
    admitted_in_every_values_text(&format!("{on}---\n"));
    admitted_in_every_values_text(&format!("{on}---\n{off}"));
    admitted_in_every_values_text(&format!("{on}---\n\"not: [yaml\n"));
    admitted_in_every_values_text(&format!("---\n{on}...\n"));
    denied_in_every_values_text(&format!("{off}---\n{on}"));
}

#[test]
fn empty_and_list_sections_render_as_the_chart_renders_them() {
    let on = format!("cloudConfig:\n{GLOBAL}  loadBalancer:\n    {SERIAL}: true\n");
    // An empty list or map renders an empty `[Route]`: the CCM starts.
    admitted_everywhere(&format!("{on}  route: []\n"));
    admitted_everywhere(&format!("{on}  route: {{}}\n"));
    admitted_everywhere(&format!("{on}  metadata: []\n"));
    // A list renders `0 = "a"`, which the CCM's gcfg refuses; a scalar stops the chart (at
    // the chart version the HelmChart pins, 2.36.0: before 2.29.2 there is no `[Route]`,
    // `tests/chart_generations.rs`).
    for section in ["route: [a]", "route: abc", "route: 3", "route: false"] {
        let values = format!("{on}  {section}\n");
        let (allowed, message) = validate(&helm_chart(&values));
        assert!(!allowed, "{section}: {message}");
    }
}

#[test]
fn an_empty_list_section_gets_the_missing_key_in_place() {
    // `loadBalancer: []` renders an empty [LoadBalancer]: the fix makes it the mapping that
    // holds the key, one line changed.
    let values = format!("cloudConfig:\n{GLOBAL}  loadBalancer: []\n");
    let (read, text) = values_after_mutation(&values);
    assert_eq!(read["cloudConfig"]["loadBalancer"], json!({SERIAL: true}));
    assert_eq!(
        text,
        values.replace(
            "loadBalancer: []",
            &format!("loadBalancer: {{{SERIAL}: true}}")
        )
    );
    // A labelled values ConfigMap (written only by minimal edits) is patched the same way.
    let patched = mutated(&labelled_config_map(&values));
    assert_eq!(patched["data"]["values.yaml"], json!(text));
}
