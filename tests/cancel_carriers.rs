//! The evaluation stops at the deadline in every carrier (issue 31, item 3): a 3 MiB input of
//! each carrier, evaluated with a cancel flag that fires itself at a chosen look
//! ([`Cancel::after_looks`]), returns [`Exhausted`], and looks at the flag at most
//! [`LOOKS_AFTER_FIRING`] more times before it returns.
//!
//! Why this stands for "CPU stops at the answer" without a clock: every loop over input looks
//! at the flag (the YAML parser every 1024 events, each values place, Argo CD order, payload
//! value and document, `--set` entry, site and policy). Work between two looks is bounded by
//! those strides, so the work after the flag fires is bounded by the number of looks after it:
//! code that saw the flag and went on to the next place, value or document would look again
//! there, once per piece of work. Firing points are spread over the whole run (its looks
//! counted in a run where the flag never fires), so each stage is stopped somewhere. The run's
//! own number of looks has a floor per shape: a parse that no longer looked at the flag would
//! drop below it. The wall-clock CPU after an answer is measured on the release binary by the
//! hostile benchmark (`examples/hostile_bench.rs`).

use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::{Map, Value, json};
use stackgate::budget::{Cancel, Exhausted};
use stackgate::engine::{Engine, Facts, Subject};
use stackgate::policy::PolicySet;

/// Looks at the flag after it fired: the one that stops the innermost loop, the one of each
/// loop around it on the way out, and the engine's before it returns.
const LOOKS_AFTER_FIRING: usize = 4;

/// Firing points per shape, spread evenly over its run.
const FIRING_POINTS: usize = 8;

/// The size of each shape's object, as JSON.
const SIZE: usize = 3 << 20;

const CCM: &str = "openstack-cloud-controller-manager";

/// A values string of `bytes` bytes: the CCM chart's cloud config with one line per key.
fn values_text(bytes: usize) -> String {
    let mut text = String::from("cloudConfig:\n  global:\n");
    let mut i = 0;
    while text.len() + 16 < bytes {
        text.push_str(&format!("    k{i:07}: v\n"));
        i += 1;
    }
    text
}

/// 64 KiB less a margin: the largest values string stackgate parses.
const VALUES: usize = 64 * 1024 - 64;

/// Lines (keys) in a [`values_text`] of [`VALUES`] bytes: each is four parser events (key,
/// value, and the map's share), a look every 1024.
fn looks_per_values_parse() -> usize {
    (VALUES / 15) * 2 / 1024
}

/// A K0sControlPlane (the embedded k0s ClusterConfig) installing other charts, then the CCM
/// chart, each with a 64 KiB values string: `parsed` of the others mention the CCM chart (so
/// their values are parsed for an umbrella key), the rest do not (a substring scan each).
fn k0s(parsed: usize) -> (GroupVersionKind, Value) {
    let others = SIZE / VALUES - 1;
    let mut charts: Vec<Value> = (0..others)
        .map(|i| {
            let mut values = values_text(VALUES - 64);
            if i < parsed {
                values.push_str(&format!("# not {CCM}\n"));
            }
            json!({"name": format!("app{i}"), "chartname": format!("apps/app{i}"),
                "version": "1.0.0", "namespace": "apps", "values": values})
        })
        .collect();
    charts.push(json!({"name": CCM, "chartname": format!("openstack/{CCM}"),
        "version": "2.31.1", "namespace": "kube-system", "values": values_text(VALUES)}));
    (
        GroupVersionKind::gvk(
            "controlplane.cluster.x-k8s.io",
            "v1beta1",
            "K0sControlPlane",
        ),
        json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "K0sControlPlane",
            "metadata": {"name": "k0s", "namespace": "tenant"},
            "spec": {"k0sConfigSpec": {"k0s": {"spec": {"extensions": {"helm": {
                "charts": charts}}}}}}}),
    )
}

/// An Argo CD Application with 8 sources of the CCM chart, each with a 64 KiB values string
/// and `--set` parameters filling the rest.
fn argo() -> (GroupVersionKind, Value) {
    let per_source = SIZE / 8 - VALUES;
    let parameters: Vec<Value> = (0..per_source / 52)
        .map(|i| json!({"name": format!("cloudConfig.global.p{i:07}"), "value": "v"}))
        .collect();
    let sources: Vec<Value> = (0..8)
        .map(|_| {
            json!({"chart": CCM, "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "targetRevision": "2.31.1",
                "helm": {"values": values_text(VALUES), "parameters": parameters}})
        })
        .collect();
    (
        GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
        json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "occm", "namespace": "argocd"},
            "spec": {"project": "default", "sources": sources}}),
    )
}

/// A ClusterResourceSet payload Secret: three values of ~1 MiB of manifests, each repeating
/// the cloud-config Secret and a CCM DaemonSet.
fn crs() -> (GroupVersionKind, Value) {
    let site = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                namespace: kube-system\nstringData:\n  cloud.conf: \"[Global]\\n\"\n";
    let ccm = "---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: occm\nspec:\n  \
               template:\n    spec:\n      containers:\n      - image: \
               openstack-cloud-controller-manager\n";
    let mut payload = String::new();
    while payload.len() + site.len() + ccm.len() < (1 << 20) - 1024 {
        payload.push_str(site);
        payload.push_str(ccm);
    }
    let data: Map<String, Value> = (0..3)
        .map(|i| (format!("p{i}.yaml"), Value::String(payload.clone())))
        .collect();
    (
        GroupVersionKind::gvk("", "v1", "Secret"),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "addons.cluster.x-k8s.io/resource-set",
            "metadata": {"name": "crs", "namespace": "default"}, "stringData": data}),
    )
}

/// A k3s/RKE2 HelmChart of the CCM chart whose `spec.set` fills 3 MiB.
fn helmchart_set() -> (GroupVersionKind, Value) {
    let set: Map<String, Value> = (0..SIZE / 35)
        .map(|i| (format!("cloudConfig.global.k{i:07}"), json!("v")))
        .collect();
    (
        GroupVersionKind::gvk("helm.cattle.io", "v1", "HelmChart"),
        json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": CCM, "namespace": "kube-system"},
            "spec": {"chart": CCM, "valuesContent": values_text(VALUES), "set": set}}),
    )
}

/// A ConfigMap labelled as holding the CCM chart's values: its 64 KiB values key and 3 MiB
/// of other keys.
fn labelled_values() -> (GroupVersionKind, Value) {
    let mut data: Map<String, Value> = (0..SIZE / VALUES)
        .map(|i| (format!("other{i}.yaml"), Value::String(values_text(VALUES))))
        .collect();
    data.insert("values.yaml".to_owned(), Value::String(values_text(VALUES)));
    (
        GroupVersionKind::gvk("", "v1", "ConfigMap"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "occm-values", "namespace": "kube-system",
                "labels": {"stackgate.dev/ccm-values": "values.yaml"}},
            "data": data}),
    )
}

/// A Flux HelmRelease of the CCM chart whose structured values fill 3 MiB.
fn flux() -> (GroupVersionKind, Value) {
    let global: Map<String, Value> = (0..SIZE / 16)
        .map(|i| (format!("k{i:07}"), json!("v")))
        .collect();
    (
        GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
        json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": {"spec": {"chart": CCM, "sourceRef": {"kind": "HelmRepository",
                "name": "cpo"}}}, "values": {"cloudConfig": {"global": global}}}}),
    )
}

/// Evaluates `shape` once in full (counting looks), then stopped at [`FIRING_POINTS`] looks
/// spread over that run: each stopped run is `Exhausted` within [`LOOKS_AFTER_FIRING`] looks
/// of its firing. Returns the full run's looks.
fn stops_at_each_point(name: &str, (gvk, object): (GroupVersionKind, Value)) -> usize {
    let size = object.to_string().len();
    assert!(size >= SIZE * 9 / 10, "{name}: {size} bytes");
    let object: DynamicObject = serde_json::from_value(object).expect("an object");
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies"));
    let subject = Subject::create(&gvk, &object);
    let facts = Facts::default();
    let counting = Cancel::after_looks(usize::MAX);
    let verdict = engine.evaluate_within(&subject, &facts, &counting);
    assert!(verdict.is_ok(), "{name}: a full run is an answer");
    let looks = counting.looks();
    assert!(looks > FIRING_POINTS, "{name}: {looks} looks");
    for point in 1..=FIRING_POINTS {
        let fire_at = looks * point / (FIRING_POINTS + 1);
        let cancel = Cancel::after_looks(fire_at);
        let stopped = engine.evaluate_within(&subject, &facts, &cancel);
        assert_eq!(
            stopped.err(),
            Some(Exhausted::Deadline),
            "{name}: fired at look {fire_at}"
        );
        let after = cancel.looks() - fire_at;
        assert!(
            after <= LOOKS_AFTER_FIRING,
            "{name}: fired at look {fire_at} of {looks}, then {after} more looks"
        );
    }
    looks
}

#[test]
fn k0s_charts_stop_at_the_deadline() {
    // 8 other charts' values strings mention the CCM chart, so they are parsed for an
    // umbrella key (one more and none is: the object is over the carrier limit); each parse
    // looks at the flag.
    let looks = stops_at_each_point("K0sControlPlane", k0s(8));
    assert!(looks >= 8 * looks_per_values_parse(), "{looks} looks");
}

#[test]
fn argo_cd_sources_stop_at_the_deadline() {
    let looks = stops_at_each_point("Argo CD Application, 8 sources", argo());
    // Each source's values string, and its parameters (read once per source), three times:
    // by the cloud-config site, and again by the two object rules that read chart values
    // (`cluster-name`'s `cluster.name`, `ccm-concurrency`'s `controllerExtraArgs`), which look
    // at the review's flag too (the rule context carries it).
    assert!(looks >= 3 * 8 * looks_per_values_parse(), "{looks} looks");
}

#[test]
fn cluster_resource_set_payloads_stop_at_the_deadline() {
    let looks = stops_at_each_point("ClusterResourceSet payload Secret", crs());
    // Three values parsed (about 12 events per 100 bytes), each document looked at once.
    assert!(looks >= 3 * ((1 << 20) / 100 * 12 / 1024), "{looks} looks");
}

#[test]
fn helmchart_set_entries_stop_at_the_deadline() {
    stops_at_each_point("HelmChart spec.set", helmchart_set());
}

#[test]
fn labelled_values_stop_at_the_deadline() {
    stops_at_each_point("labelled values ConfigMap", labelled_values());
}

#[test]
fn flux_values_stop_at_the_deadline() {
    let looks = stops_at_each_point("Flux HelmRelease values", flux());
    // The chart's rendering of the values' keys looks every 1024 keys.
    assert!(looks >= SIZE / 16 / 1024, "{looks} looks");
}
