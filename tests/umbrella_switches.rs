//! Umbrella charts are switched by the umbrella's `Chart.yaml` (issue 33 item 3), not by
//! `<key>.enabled`: a dependency's `condition` is a comma-separated list of value paths of
//! which the first that resolves to a bool decides, none resolving leaves it enabled; its
//! `tags` switch it off only when every listed tag that is set is false (and one is), and a
//! condition that resolves overrides them; `alias` renames its values key. Source: helm/helm
//! v3.17.2 (commit cc0bbbd6d6276b83880042c1ecb34087e84d41eb) `pkg/chartutil/dependencies.go`
//! `processDependencyConditions`, `processDependencyTags`, `getAliasDependency`,
//! `processDependencyEnabled` (tags first, then conditions) and `pkg/chartutil/values.go`
//! `PathValue` (a path to a table does not resolve).
//!
//! Where the umbrella's `Chart.yaml` is read (`stackgate check` walking the chart's
//! directory), the subchart is switched exactly as Helm switches it. Where it is not (the
//! webhook, a GitOps object naming an umbrella chart), a value that a condition or tag could
//! read as `false` makes "switched off" a state stackgate cannot rule out: a denial becomes a
//! warning that names what it cannot see, the fix is still written (it is right in both
//! states), and with no such value the subchart is judged as rendered.

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

const CCM: &str = "openstack-cloud-controller-manager";
const SERIAL: &str = "provider-requires-serial-api-calls";
const RULE: &str = "serial-lb-api-calls";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn engine() -> Engine {
    in_process::engine()
}

fn respond(webhook: Webhook, object: &Value) -> Value {
    in_process::respond(webhook, object, "umbrella-switches")
}

/// The validating webhook's answer for a CREATE of `object`: (allowed, message and warnings).
fn validate(object: &Value) -> (bool, String) {
    in_process::validate(object, "umbrella-switches")
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

fn check_run(argv: &[&str], stdin: &str) -> Report {
    let mut full = vec!["check"];
    full.extend_from_slice(argv);
    let options = CheckOptions::from(&Cmd::try_parse_from(full).expect("valid flags").args);
    check::check(&options, &engine(), &mut stdin.as_bytes()).expect("check runs")
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

fn serial_at(items: &[(Level, String, String)], level: Level) -> bool {
    items.iter().any(|(l, rule, _)| *l == level && rule == RULE)
}

/// A Flux HelmRelease of the umbrella chart `platform` with `values`.
fn umbrella_release(values: Value) -> Value {
    json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "platform", "namespace": "kube-system"},
        "spec": {"interval": "5m",
            "chart": {"spec": {"chart": "platform", "version": "1.2.3",
                "sourceRef": {"kind": "HelmRepository", "name": "internal"}}},
            "values": values}})
}

/// An RKE2/k3s HelmChart of the umbrella chart `platform` with a `valuesContent` string.
fn umbrella_helm_chart(values: &str) -> Value {
    json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
        "metadata": {"name": "platform", "namespace": "kube-system"},
        "spec": {"chart": "platform", "repo": "https://charts.example.com",
            "valuesContent": values}})
}

/// The CCM's values with serial calls switched off, plus `extra` keys.
fn ccm_values(extra: Value) -> Value {
    let mut values = json!({"cloudConfig": {"global": {"auth-url": "https://k:5000/v3"},
        "loadBalancer": {SERIAL: false}}});
    for (k, v) in extra.as_object().expect("a map") {
        values[k] = v.clone();
    }
    values
}

/// The webhook and `check` on an umbrella object whose `Chart.yaml` they cannot see, where a
/// visible value could switch the subchart off: admitted with a warning, and `check` warns (never
/// silent, never an error) naming the unseen `Chart.yaml` and the value `why` that could
/// switch the subchart off. (A webhook warning is one line of at most 256 characters, which
/// this location fills: the full text is `check`'s and the audit's.)
fn warned_not_denied(object: &Value, why: &str) {
    let (allowed, message) = validate(object);
    assert!(allowed, "denied though the subchart may be off: {message}");
    assert!(message.contains(SERIAL), "no warning: {message}");
    let items = items_of(&check_run(&["-"], &object.to_string()));
    assert!(serial_at(&items, Level::Warning), "check: {items:?}");
    assert!(!serial_at(&items, Level::Error), "check: {items:?}");
    assert!(
        items
            .iter()
            .any(|(level, rule, message)| *level == Level::Warning
                && rule == RULE
                && message.contains("Chart.yaml")
                && message.contains(why)),
        "check's warning names neither the unseen Chart.yaml nor {why}: {items:?}"
    );
}

/// `enabled: false` under the subchart key switches nothing when the umbrella's `Chart.yaml`
/// names no such condition (Helm renders the subchart): it was skipped in silence, now it
/// is a warning with the fix.
#[test]
fn an_enabled_false_the_webhook_cannot_tie_to_a_condition_is_a_warning_not_silence() {
    let object = umbrella_release(json!({CCM: ccm_values(json!({"enabled": false}))}));
    warned_not_denied(&object, &format!("{CCM}.enabled"));
    // The same in a values string.
    let text = format!(
        "{CCM}:\n  enabled: false\n  cloudConfig:\n    loadBalancer:\n      {SERIAL}: false\n"
    );
    warned_not_denied(&umbrella_helm_chart(&text), &format!("{CCM}.enabled"));
}

/// `tags.cloud: false` switches the subchart off when its dependency lists the tag `cloud`:
/// denying it was a false denial where the `Chart.yaml` is not seen.
#[test]
fn a_false_tag_makes_a_denial_a_warning_where_chart_yaml_is_unseen() {
    let object = umbrella_release(json!({"tags": {"cloud": false}, CCM: ccm_values(json!({}))}));
    warned_not_denied(&object, "tags.cloud");
}

/// A condition can name any path: a `false` elsewhere in the values (another switch) is one
/// the umbrella's `Chart.yaml` could name.
#[test]
fn a_false_at_another_path_could_be_the_condition() {
    let object = umbrella_release(json!({"switches": {"ccm": false}, CCM: ccm_values(json!({}))}));
    warned_not_denied(&object, "switches.ccm");
}

/// A missing setting is still added by the mutating webhook under the subchart key: the fix
/// is right whether the umbrella renders the subchart or not.
#[test]
fn the_fix_is_written_whatever_the_switch() {
    let object = umbrella_release(json!({CCM: {"enabled": false,
        "cloudConfig": {"global": {"auth-url": "https://k:5000/v3"}}}}));
    let fixed = mutated(&object).expect("a patch");
    assert_eq!(
        fixed["spec"]["values"][CCM]["cloudConfig"]["loadBalancer"][SERIAL],
        json!(true),
        "{fixed}"
    );
    let (allowed, message) = validate(&fixed);
    assert!(allowed && !message.contains(SERIAL), "{message}");
}

/// With no value that a condition or tag could read as false, the subchart is rendered
/// whatever the `Chart.yaml` says: still denied, everywhere.
#[test]
fn with_nothing_that_could_switch_it_off_the_subchart_is_still_denied() {
    let object = umbrella_release(json!({"switches": {"ccm": true},
        CCM: ccm_values(json!({"enabled": true}))}));
    let (allowed, message) = validate(&object);
    assert!(!allowed, "admitted: {message}");
    let items = items_of(&check_run(&["-"], &object.to_string()));
    assert!(serial_at(&items, Level::Error), "check: {items:?}");
}

/// An umbrella chart directory `check` walks: its `Chart.yaml` (the dependency on the CCM
/// chart given by `dependency`) and `values.yaml`; the findings for its values file.
fn check_umbrella(dependency: &str, values: &str) -> Vec<(Level, String, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = format!(
        "apiVersion: v2\nname: platform\nversion: 1.2.3\ndependencies:\n- name: {CCM}\n  \
         version: 2.36.0\n  repository: https://kubernetes.github.io/cloud-provider-openstack\n\
         {dependency}"
    );
    std::fs::write(dir.path().join("Chart.yaml"), chart).expect("write Chart.yaml");
    std::fs::write(dir.path().join("values.yaml"), values).expect("write values");
    let path = dir.path().to_str().expect("UTF-8 path").to_owned();
    items_of(&check_run(
        &[&path, "--values-for", &format!("{CCM}=values.yaml")],
        "",
    ))
}

/// The CCM's values with serial calls off, under `key`, with `around` at the umbrella's root.
fn umbrella_values(key: &str, inner: &str, around: &str) -> String {
    format!("{around}{key}:\n  {inner}cloudConfig:\n    loadBalancer:\n      {SERIAL}: false\n")
}

/// Where `check` reads the umbrella's `Chart.yaml`, the subchart is switched as Helm switches
/// it, for every form of `condition`, `tags` and `alias`.
#[test]
fn check_switches_the_subchart_as_helm_does_from_the_umbrellas_chart_yaml() {
    // (dependency lines in Chart.yaml, values, rendered by Helm)
    let cases: &[(&str, String, bool)] = &[
        // No condition: `enabled: false` switches nothing.
        ("", umbrella_values(CCM, "enabled: false\n  ", ""), true),
        // The conventional condition.
        (
            "  condition: openstack-cloud-controller-manager.enabled\n",
            umbrella_values(CCM, "enabled: false\n  ", ""),
            false,
        ),
        (
            "  condition: openstack-cloud-controller-manager.enabled\n",
            umbrella_values(CCM, "enabled: true\n  ", ""),
            true,
        ),
        // Another path.
        (
            "  condition: switches.ccm\n",
            umbrella_values(CCM, "enabled: true\n  ", "switches:\n  ccm: false\n"),
            false,
        ),
        // A list: the first path that resolves to a bool decides.
        (
            "  condition: switches.ccm,openstack-cloud-controller-manager.enabled\n",
            umbrella_values(CCM, "enabled: false\n  ", "switches:\n  other: 1\n"),
            false,
        ),
        (
            "  condition: switches.ccm,openstack-cloud-controller-manager.enabled\n",
            umbrella_values(CCM, "enabled: false\n  ", "switches:\n  ccm: true\n"),
            true,
        ),
        // A non-bool at a path does not decide; Helm trims only the whole list, so a path
        // after ", " (with its space) never resolves.
        (
            "  condition: switches.ccm, openstack-cloud-controller-manager.enabled\n",
            umbrella_values(CCM, "enabled: false\n  ", "switches:\n  ccm: \"false\"\n"),
            true,
        ),
        // Tags: all listed tags that are set false switch it off; one true keeps it on.
        (
            "  tags: [cloud]\n",
            umbrella_values(CCM, "", "tags:\n  cloud: false\n"),
            false,
        ),
        (
            "  tags: [cloud, openstack]\n",
            umbrella_values(CCM, "", "tags:\n  cloud: false\n  openstack: true\n"),
            true,
        ),
        // A condition that resolves overrides the tags.
        (
            "  tags: [cloud]\n  condition: openstack-cloud-controller-manager.enabled\n",
            umbrella_values(CCM, "enabled: true\n  ", "tags:\n  cloud: false\n"),
            true,
        ),
        // An alias renames the key; `enabled` under the chart's own name is another chart's.
        (
            "  alias: occm\n  condition: occm.enabled\n",
            umbrella_values("occm", "", &format!("{CCM}:\n  enabled: false\n")),
            true,
        ),
        (
            "  alias: occm\n  condition: occm.enabled\n",
            umbrella_values("occm", "enabled: false\n  ", ""),
            false,
        ),
    ];
    for (dependency, values, rendered) in cases {
        let items = check_umbrella(dependency, values);
        assert_eq!(
            serial_at(&items, Level::Error),
            *rendered,
            "Chart.yaml dependency {dependency:?}, values {values:?}: {items:?}"
        );
        if !rendered {
            assert!(
                !items.iter().any(|(_, rule, _)| rule == RULE),
                "a switched-off subchart renders nothing: {items:?}"
            );
        }
    }
}
