//! Helm-values sites: the `openstack-cloud-controller-manager` chart's values inside GitOps
//! objects, and the chart's `controllerExtraArgs`.
//!
//! Which objects these are, where each names the chart and which of its fields hold values (in
//! Helm's order, and which stackgate cannot see) is the registry of delivery paths
//! ([`super::delivery::REGISTRY`], generated into `docs/carriers.md`): every entry whose
//! reader names this file. With values this object does not hold (Flux `spec.valuesFrom`, Argo
//! CD `helm.valueFiles`, …) the site is unseen (`SiteError::Unseen`) unless the values here
//! decide alone.
//!
//! Inside the values, the chart renders its Secret `cloud.conf` from `cloudConfigContents`
//! (raw INI) when that is set, else from the structured `cloudConfig` map
//! ([`super::render`]); with `secret.enabled` or `secret.create` false it renders no Secret,
//! so the values are not a site (the externally provided Secret is checked on its own).
//!
//! Values set on top (`spec.set`, `helm.parameters`) are merged as Helm merges `--set` over
//! values files; a rendered line that comes from one is located at it and an edit of its key
//! is written there (`values::Overridden`). Entries are read with Helm's own `--set` parser
//! ([`super::strvals`]); one it cannot read makes the site say it cannot tell.
//!
//! This module finds the values and reads the cloud config in them; the carriers that map it
//! back to the object and write edits are in `values.rs` (and `object_data.rs` for
//! `cloudConfigContents` in structured values, a plain string field).

use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::chart::chart_matches;
use super::generation::{Generation, Generations};
use super::object_data::TextField;
use super::path::{display, joined, pointer, shown_entry};
use super::render::{self, Origin};
use super::strvals::{self, SetBudget, StrvalsError, Typing};
use super::values::{
    Overridden, Override, RenderedValues, UnseenValues, ValuesAt, ValuesText, ValuesTextContents,
    ValuesTextRendered,
};
use super::{FoundConfig, Holder, SiteError};
use crate::budget::Cancel;
use crate::yaml::{self, Seg};

/// Largest Helm values string (`valuesContent`, Argo `helm.values`) stackgate parses for the
/// CCM chart, in bytes. The chart's values are a few KiB; parsed YAML costs hundreds of bytes
/// per node, so a larger string is reported as one stackgate cannot check instead.
pub const MAX_VALUES_TEXT_BYTES: usize = 64 * 1024;

/// Most places in one object that carry the CCM chart's values (Argo CD `spec.sources`
/// entries naming the chart, each with `valuesObject` and `values`). Real Applications have one
/// or two; more are reported, and none is read.
pub const MAX_CARRIERS_PER_OBJECT: usize = 8;

/// Charts whose values hold an OpenStack CCM cloud config, when the policy set names none.
pub const DEFAULT_CHARTS: &[&str] = &[
    "openstack-cloud-controller-manager",
    // Giant Swarm's umbrella: the CCM chart's values shape at its root (`delivery.rs`).
    super::delivery::GIANT_SWARM_APP_CHART,
];

/// Group and version of the synthetic object `stackgate check` builds for a plain values
/// file: `{apiVersion: stackgate.dev/v1alpha1, kind: HelmValues, chart: <name>, values: {...}}`.
pub const VALUES_FILE_API_VERSION: &str = "stackgate.dev/v1alpha1";
/// Kind of the synthetic values-file object.
pub const VALUES_FILE_KIND: &str = "HelmValues";
/// Field of the synthetic values-file object naming the key the chart's values are under,
/// when the file is an umbrella chart's values file (`stackgate check` reads the key from the
/// umbrella's `Chart.yaml` dependency `alias`).
pub const VALUES_FILE_SUBCHART_KEY: &str = "subchartKey";
/// Field of the synthetic values-file object holding the umbrella's `Chart.yaml` dependency
/// `condition` of the subchart under [`VALUES_FILE_SUBCHART_KEY`] (absent: none).
pub const VALUES_FILE_SUBCHART_CONDITION_KEY: &str = "subchartCondition";
/// Field of the synthetic values-file object holding that dependency's `tags` (a list).
pub const VALUES_FILE_SUBCHART_TAGS_KEY: &str = "subchartTags";
/// Field of the synthetic values-file object naming the chart version the values are for
/// (`stackgate check --values-for CHART@VERSION`), which decides the chart's generation
/// ([`super::generation`]).
pub const VALUES_FILE_CHART_VERSION_KEY: &str = "chartVersion";

/// A place in an object that holds the chart's values.
#[derive(Debug, Clone)]
struct ValuesPlace {
    /// Path of the values map or of the values string, from the object root.
    path: Vec<Seg>,
    /// The values are a YAML string (HelmChart `valuesContent`, Argo `helm.values`), not a map.
    yaml_string: bool,
    /// Where values beneath these are named but not held (Flux `spec.valuesFrom` and
    /// `spec.chart.spec.valuesFiles` / `valuesFile`, Argo CD `helm.valueFiles`).
    unseen: Vec<Vec<Seg>>,
    /// Where values set on top of these are named but not held: Argo CD
    /// `helm.fileParameters` (Helm's `--set-file`, applied after every `--set-string`), RKE2/k3s
    /// `spec.valuesSecrets` (values files mounted after `valuesContent` and `values`).
    unseen_on_top: Option<OnTop>,
    /// The chart that renders these values cannot be known from the object: where that is
    /// said (HelmChart `spec.chartContent`, Flux `spec.chartRef`) and what messages say of it.
    chart_unseen: Option<(Vec<Seg>, String)>,
    /// Where values set on top of these are (HelmChart `spec.set`, Argo CD `helm.parameters`).
    overrides: Option<OverrideSource>,
    /// Structured values Helm reads as a values file after these (RKE2/k3s HelmChart and
    /// HelmChartConfig `spec.values`, mounted as `values-*-001-*-Values.yaml` after the
    /// `valuesContent` file by helm-controller's `setValuesSecret`).
    values_over: Option<Vec<Seg>>,
    /// The CCM chart is a subchart of the chart these values are for, under this key: `path`
    /// ends with it, and overrides are read below it.
    alias: Option<String>,
    /// The chart generations the delivery's pinned version allows (all when it pins none).
    generations: Generations,
    /// Whether the umbrella chart renders the subchart under `alias` ([`super::umbrella`]).
    switch: Switch,
}

/// Whether an umbrella chart renders its CCM subchart, as far as the object shows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Switch {
    /// Rendered: not a subchart, a subchart the umbrella's `Chart.yaml` (read) switches on,
    /// or one whose values hold nothing a condition or tag could read as `false`.
    On,
    /// The umbrella's `Chart.yaml` is not visible and these values (named) could switch the
    /// subchart off: read both ways.
    Unseen(String),
}

/// A field naming values, which stackgate cannot see, that the controller hands to Helm after
/// the values of a place.
#[derive(Debug, Clone)]
enum OnTop {
    /// Argo CD `helm.fileParameters` (`--set-file`, over everything): unseen only when one
    /// sets the cloud config.
    FileParameters(Vec<Seg>),
    /// kustomize `helmCharts[].additionalValuesFiles` (`-f` files after the merged values
    /// file), and its `valuesFile` when `valuesMerge: merge` puts it over the inline values.
    AdditionalValuesFiles(Vec<Vec<Seg>>),
    /// RKE2/k3s helm-controller `spec.valuesSecrets`: Secret keys mounted as values files after
    /// the object's `valuesContent` and `values` (any of them may set any value); with the
    /// object's name (its own `chart-values-<name>` Secret is not mounted).
    ValuesSecrets(Vec<Seg>, String),
}

/// A field of `--set`-like entries that Helm applies on top of the values files.
#[derive(Debug, Clone)]
enum OverrideSource {
    /// RKE2/k3s HelmChart `spec.set`: a map of `--set` path → string or integer.
    HelmChartSet(Vec<Seg>),
    /// Argo CD `helm.parameters`: a list of `{name, value, forceString}`.
    ArgoParameters(Vec<Seg>),
}

/// The chart names a policy set's sites document asks for.
pub fn chart_names(sites: &super::SitesDocument) -> Vec<String> {
    // The sites document has no chart list yet: use the default.
    let _ = sites;
    DEFAULT_CHARTS.iter().map(|s| (*s).to_owned()).collect()
}

fn keys(path: &[&str]) -> Vec<Seg> {
    path.iter().map(|k| Seg::key(k)).collect()
}

fn get<'a>(root: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(root, |v, seg| match seg {
        Seg::Key(k) => v.get(k),
        Seg::Index(i) => v.get(i),
    })
}

fn str_at<'a>(root: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(root, |v, k| v.get(k))
        .and_then(Value::as_str)
}

/// The object's content as one JSON value (`data` holds everything but apiVersion, kind and
/// metadata, which no carrier path uses).
fn content(object: &DynamicObject) -> &Value {
    &object.data
}

/// How many leading segments of `path` exist in `root` (not null).
fn existing_segments(root: &Value, path: &[Seg]) -> usize {
    let mut existing = 0;
    let mut node = root;
    for seg in path {
        let next = match seg {
            Seg::Key(k) => node.get(k),
            Seg::Index(i) => node.get(i),
        };
        match next {
            Some(v) if !v.is_null() => {
                existing += 1;
                node = v;
            }
            _ => break,
        }
    }
    existing
}

/// The places in `object` that hold values of the charts in `charts`.
///
/// Values strings are parsed here (to find an umbrella chart's subchart key): once `cancel`
/// fires no more are, and what is returned is not an answer (the caller checks the flag).
fn values_places(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
    cancel: &Cancel,
) -> Vec<ValuesPlace> {
    let root = content(object);
    // (chart reference, values path, whether a YAML string) for kinds with one place.
    let single: Option<(Option<&str>, &[&str], bool)> =
        match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
            ("helm.toolkit.fluxcd.io", "v2" | "v2beta2" | "v2beta1", "HelmRelease") => Some((
                str_at(root, &["spec", "chart", "spec", "chart"])
                    .or_else(|| str_at(root, &["spec", "chartRef", "name"])),
                &["spec", "values"],
                false,
            )),
            ("helm.cattle.io", "v1", "HelmChart") => Some((
                str_at(root, &["spec", "chart"]),
                &["spec", "valuesContent"],
                true,
            )),
            // A HelmChartConfig customises the HelmChart of the same name.
            ("helm.cattle.io", "v1", "HelmChartConfig") => Some((
                object.metadata.name.as_deref(),
                &["spec", "valuesContent"],
                true,
            )),
            ("stackgate.dev", "v1alpha1", VALUES_FILE_KIND) => {
                Some((str_at(root, &["chart"]), &["values"], false))
            }
            // Azimuth's addon provider: one template-free template is the values as written.
            ("addons.stackhpc.com", "v1alpha1", "HelmRelease")
                if super::delivery::plain_values_template(root).is_some() =>
            {
                Some((
                    str_at(root, &["spec", "chart", "name"]),
                    &["spec", "valuesSources", "0", "template"],
                    true,
                ))
            }
            // k0s applies `Chart` objects from its manifests directory (k0sproject/k0s
            // `pkg/apis/helm/v1beta1/chart_types.go`: `chartName`, `version`, `values` string).
            ("helm.k0sproject.io", "v1beta1", "Chart") => Some((
                str_at(root, &["spec", "chartName"]),
                &["spec", "values"],
                true,
            )),
            ("argoproj.io", "v1alpha1", "Application") => return argo_places(root, charts, cancel),
            ("argoproj.io", "v1alpha1", "ApplicationSet") => {
                return application_set_places(root, charts, cancel);
            }
            ("config.projectsveltos.io", _, "ClusterProfile" | "Profile") => {
                return sveltos_places(root, charts);
            }
            ("fleet.cattle.io", _, "HelmOp" | "Bundle") => {
                return fleet_places(root, charts, &["spec", "helm"]);
            }
            ("stackgate.dev", "v1alpha1", super::delivery::FLEET_YAML_KIND) => {
                return fleet_places(root, charts, &["helm"]);
            }
            ("k0s.k0sproject.io", _, "ClusterConfig") => {
                return k0s_places(root, charts, &[], cancel);
            }
            ("kustomize.config.k8s.io", _, "Kustomization") => {
                return kustomize_places(root, charts);
            }
            // Objects that embed a k0s ClusterConfig (k0smotron, k0sctl): `delivery.rs`.
            (group, _, kind) => match super::delivery::k0s_config_path(group, kind) {
                Some(at) => return k0s_places(root, charts, at, cancel),
                None => None,
            },
        };
    let Some((chart, path, yaml_string)) = single else {
        return Vec::new();
    };
    // A list index in a static path (Azimuth's `valuesSources[0]`) is an index.
    let path: Vec<Seg> = path
        .iter()
        .map(|k| k.parse::<usize>().map_or_else(|_| Seg::key(k), Seg::Index))
        .collect();
    // Where each delivery pins the chart version (a HelmChartConfig's HelmChart has it).
    let version = match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("helm.toolkit.fluxcd.io", _) => str_at(root, &["spec", "chart", "spec", "version"]),
        ("helm.cattle.io", "HelmChart") | ("helm.k0sproject.io", "Chart") => {
            str_at(root, &["spec", "version"])
        }
        ("addons.stackhpc.com", "HelmRelease") => str_at(root, &["spec", "chart", "version"]),
        ("stackgate.dev", VALUES_FILE_KIND) => str_at(root, &[VALUES_FILE_CHART_VERSION_KEY]),
        _ => None,
    };
    let helm_controller = gvk.group == "helm.cattle.io";
    let holds_ccm = || match yaml_string {
        true => holds_ccm_values(get(root, &path.clone()), cancel),
        false => get(root, &path.clone())
            .and_then(Value::as_object)
            .is_some_and(|m| {
                m.contains_key("cloudConfig") || m.contains_key("cloudConfigContents")
            }),
    };
    let named = chart.is_some_and(|c| chart_matches(c, charts));
    // The chart these values are for, when the object does not name it: a HelmChart's inline
    // archive (`spec.chartContent` overrides `spec.chart`), or a Flux `spec.chartRef` whose
    // object is not named after the chart (`stackgate check` resolves the object when it is
    // among its inputs and names the chart in the release). Values with the CCM chart's own
    // top-level keys are then named as unseen, never read as the upstream chart's.
    let chart_unseen = chart_not_named(gvk, root, named).filter(|_| named || holds_ccm());
    let ours = named
        || (helm_controller && gvk.kind == "HelmChartConfig" && holds_ccm())
        || chart_unseen.is_some();
    let mut place = ValuesPlace {
        path: path.clone(),
        yaml_string,
        unseen: if gvk.group == "helm.toolkit.fluxcd.io" {
            vec![
                keys(&["spec", "valuesFrom"]),
                keys(&["spec", "chart", "spec", "valuesFiles"]),
                keys(&["spec", "chart", "spec", "valuesFile"]),
            ]
        } else {
            Vec::new()
        },
        unseen_on_top: helm_controller.then(|| {
            let name = object.metadata.name.clone().unwrap_or_default();
            OnTop::ValuesSecrets(keys(&["spec", "valuesSecrets"]), name)
        }),
        chart_unseen,
        overrides: (gvk.kind == "HelmChart" && gvk.group == "helm.cattle.io")
            .then(|| OverrideSource::HelmChartSet(keys(&["spec", "set"]))),
        values_over: (gvk.group == "helm.cattle.io").then(|| keys(&["spec", "values"])),
        alias: None,
        generations: generations_of(chart, version),
        switch: Switch::On,
    };
    if gvk.kind == VALUES_FILE_KIND
        && let Some(key) = str_at(root, &[VALUES_FILE_SUBCHART_KEY])
    {
        // An umbrella chart's values file: the chart's values are under the dependency's
        // key, whatever else the file holds, unless the dependency's condition or tags
        // (from the umbrella's `Chart.yaml`, which `check` read) switch it off.
        let dependency = super::umbrella::Dependency {
            key: key.to_owned(),
            condition: str_at(root, &[VALUES_FILE_SUBCHART_CONDITION_KEY]).map(str::to_owned),
            tags: get(root, &[Seg::key(VALUES_FILE_SUBCHART_TAGS_KEY)])
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            version: None,
        };
        let values = get(root, &place.path).unwrap_or(&Value::Null);
        if !dependency.switched_on(values) {
            return Vec::new();
        }
        place.path.push(Seg::key(key));
        place.alias = Some(key.to_owned());
        // The subchart's version is the umbrella's dependency's, which `check` passes as the
        // file's chart version (or `--values-for CHART@VERSION` does): none, every generation.
        return vec![place];
    }
    if !yaml_string && let Some(alias) = subchart_alias(get(root, &place.path), charts, ours) {
        place.switch = unseen_switch(&alias, get(root, &place.path), root, &place);
        place.path.push(Seg::key(&alias));
        place.alias = Some(alias);
        place.generations = Generations::ALL;
        return vec![place];
    }
    if yaml_string
        && let Some(alias) = umbrella_text_alias(get(root, &place.path), charts, ours, cancel)
    {
        // The values string stays the carrier; the CCM's values are under `alias` in it.
        let values = text_values(get(root, &place.path), None, cancel);
        place.switch = unseen_switch(&alias, values.as_ref(), root, &place);
        place.alias = Some(alias);
        place.generations = Generations::ALL;
        return vec![place];
    }
    if ours { vec![place] } else { Vec::new() }
}

/// The chart generations values for `chart` at `version` may be rendered with: the upstream
/// chart's versions are placed in [`super::generation::CHART_TAGS`]; Giant Swarm's app has
/// versions of its own and renders with the helper of the CCM subchart it ships, read as the
/// newest generation (as before generations were told apart).
fn generations_of(chart: Option<&str>, version: Option<&str>) -> Generations {
    let giant_swarm = [super::delivery::GIANT_SWARM_APP_CHART.to_owned()];
    if chart.is_some_and(|c| chart_matches(c, &giant_swarm)) {
        return Generations::only(Generation::Route);
    }
    Generations::of_version(version)
}

/// Where and why the chart that renders an object's values is not the one it names: a
/// RKE2/k3s HelmChart's `spec.chartContent` (a base64 chart archive, which helm-controller
/// installs in place of `spec.chart` and `spec.version`: k3s-io/helm-controller @ 21a911f,
/// `pkg/apis/helm.cattle.io/v1/types.go` `ChartContent`), or a Flux HelmRelease's
/// `spec.chartRef` to an `OCIRepository` or source `HelmChart` that is not named after the
/// chart (`named`: the reference's name is). None when the object names its chart.
fn chart_not_named(
    gvk: &GroupVersionKind,
    root: &Value,
    named: bool,
) -> Option<(Vec<Seg>, String)> {
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("helm.cattle.io", "HelmChart") => {
            str_at(root, &["spec", "chartContent"]).filter(|c| !c.trim().is_empty())?;
            Some((
                keys(&["spec", "chartContent"]),
                "the chart archive inlined in spec.chartContent (its templates and default \
                 values, installed in place of the upstream chart)"
                    .to_owned(),
            ))
        }
        ("helm.toolkit.fluxcd.io", "HelmRelease") if !named => {
            if str_at(root, &["spec", "chart", "spec", "chart"]).is_some() {
                return None;
            }
            let reference = root.pointer("/spec/chartRef")?;
            let kind = reference
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("object");
            let name = reference
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("<unnamed>");
            let name = match reference.get("namespace").and_then(Value::as_str) {
                Some(ns) => format!("{ns}/{name}"),
                None => name.to_owned(),
            };
            Some((
                keys(&["spec", "chartRef"]),
                format!(
                    "the chart of {} {} (spec.chartRef), which this HelmRelease does not name",
                    shown_entry(kind),
                    shown_entry(&name)
                ),
            ))
        }
        _ => None,
    }
}

/// Whether a values string holds the CCM chart's own values, read structurally: a top-level
/// `cloudConfig` or `cloudConfigContents` key, however it is spelled in YAML.
///
/// A RKE2/k3s HelmChartConfig customises the HelmChart of its name, which need not be named
/// after the chart it installs (`occm` installing `openstack-cloud-controller-manager`); the
/// webhook sees the HelmChartConfig alone and cannot tell which chart that HelmChart installs.
/// Values with the CCM chart's own top-level keys are taken as the CCM chart's (no other chart
/// known to stackgate renders a `cloudConfig`), so a `false` in them is never admitted in
/// silence; `stackgate check` merges the pair when both are in its inputs.
fn holds_ccm_values(raw: Option<&Value>, cancel: &Cancel) -> bool {
    text_values(raw, None, cancel)
        .as_ref()
        .and_then(Value::as_object)
        .is_some_and(|m| m.contains_key("cloudConfig") || m.contains_key("cloudConfigContents"))
}

/// The key under which structured `values` hold the CCM chart's values as a subchart of an
/// umbrella chart: a key named after the chart (Helm's default alias) whose value is a map.
/// Whether the umbrella renders it is its `Chart.yaml`'s to say ([`unseen_switch`]), not an
/// `enabled` key's. Values of the CCM chart itself (`ours`) are read at their root when they
/// hold `cloudConfig` or `cloudConfigContents`.
fn subchart_alias(values: Option<&Value>, charts: &[String], ours: bool) -> Option<String> {
    let map = values?.as_object()?;
    if ours && (map.contains_key("cloudConfig") || map.contains_key("cloudConfigContents")) {
        return None;
    }
    charts
        .iter()
        .find(|chart| map.get(chart.as_str()).is_some_and(Value::is_object))
        .cloned()
}

/// Whether the umbrella chart whose values (at its root: `values`) hold the CCM chart's under
/// `alias` renders it, as far as an object that does not show the umbrella's `Chart.yaml` can
/// tell: [`Switch::Unseen`] when those values, or the structured values or `--set` entries
/// `place` applies on top, hold a `false` a condition or tag could read.
fn unseen_switch(alias: &str, values: Option<&Value>, root: &Value, place: &ValuesPlace) -> Switch {
    let null = Value::Null;
    let mut sources: Vec<(String, &Value)> = vec![(String::new(), values.unwrap_or(&null))];
    if let Some(path) = &place.values_over
        && let Some(over) = get(root, path)
    {
        sources.push((display(path), over));
    }
    let set = place
        .overrides
        .as_ref()
        .map(|source| false_entries(root, source, alias));
    if let Some((path, set)) = &set {
        sources.push((display(path), set));
    }
    let named: Vec<(&str, &Value)> = sources.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    match super::umbrella::could_switch_off(alias, &named) {
        Some(why) => Switch::Unseen(why),
        None => Switch::On,
    }
}

/// The `--set`-like entries of `source` that set `false` (a bool, or the text Helm types as
/// one), as a map from each entry's key as written to `false`; entries below the subchart key
/// `alias` but its `enabled` are the CCM chart's settings, not switches, and are left out.
fn false_entries(root: &Value, source: &OverrideSource, alias: &str) -> (Vec<Seg>, Value) {
    let is_false = |v: &Value| match v {
        Value::Bool(b) => !b,
        Value::String(s) => s.eq_ignore_ascii_case("false"),
        _ => false,
    };
    let setting = |key: &str| {
        key.strip_prefix(alias)
            .and_then(|rest| rest.strip_prefix('.'))
            .is_some_and(|rest| rest != "enabled")
    };
    let mut out = serde_json::Map::new();
    let path = match source {
        OverrideSource::HelmChartSet(path) => {
            for (key, value) in get(root, path)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                if is_false(value) && !setting(key) {
                    out.insert(key.clone(), Value::Bool(false));
                }
            }
            path
        }
        OverrideSource::ArgoParameters(path) => {
            for parameter in get(root, path)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let forced = parameter.get("forceString") == Some(&Value::Bool(true));
                let name = parameter.get("name").and_then(Value::as_str);
                let value = parameter.get("value").unwrap_or(&Value::Null);
                if let Some(name) = name
                    && !forced
                    && is_false(value)
                    && !setting(name)
                {
                    out.insert(name.to_owned(), Value::Bool(false));
                }
            }
            path
        }
    };
    (path.clone(), Value::Object(out))
}

/// The values in a YAML values string (`raw`), below `alias` when set: None when absent,
/// not a string, over [`MAX_VALUES_TEXT_BYTES`] or not YAML (the cloud-config site reports
/// those; None too once `cancel` has fired).
fn text_values(raw: Option<&Value>, alias: Option<&str>, cancel: &Cancel) -> Option<Value> {
    let text = raw?.as_str().filter(|t| t.len() <= MAX_VALUES_TEXT_BYTES)?;
    let values = yaml::parse_one_within(text, cancel)
        .and_then(|n| n.to_json())
        .ok()?;
    match alias {
        Some(alias) => values.get(alias).cloned(),
        None => Some(values),
    }
}

/// The subchart key of the CCM chart's values inside a values string of an umbrella chart
/// (see [`subchart_alias`]). The string is read with the YAML reader (within its caps and
/// [`MAX_VALUES_TEXT_BYTES`]), so the key is found however YAML spells it: quoted, flow-style,
/// `? key`, anchored, tagged or escaped. Scanning lines for the bare key missed all of these.
/// A string that does not mention a chart name, as written or with its escapes read
/// ([`super::payload::mentions`], the payload prefilter's sound test), holds no such key and
/// is not parsed: a k0s config or Argo CD Application with dozens of other charts' values
/// costs substring scans, not a parse of each (and this runs again for every rule that reads
/// the chart's values).
///
/// A string over [`MAX_VALUES_TEXT_BYTES`] is not parsed; when it names the chart anywhere it
/// is taken as an umbrella's values under that key, so the site reports it as over
/// stackgate's limit instead of padding hiding the subchart's values in silence. A key
/// spelled only with YAML escapes in such a string is not found.
fn umbrella_text_alias(
    raw: Option<&Value>,
    charts: &[String],
    ours: bool,
    cancel: &Cancel,
) -> Option<String> {
    if !ours
        && let Some(text) = raw.and_then(Value::as_str)
        && text.len() > MAX_VALUES_TEXT_BYTES
    {
        return charts
            .iter()
            .find(|chart| text.contains(chart.as_str()))
            .cloned();
    }
    if let Some(text) = raw.and_then(Value::as_str)
        && !super::payload::mentions(text, charts)
    {
        return None;
    }
    subchart_alias(text_values(raw, None, cancel).as_ref(), charts, ours)
}

/// k0s `ClusterConfig` (at `at` in the object: empty for the ClusterConfig itself): each
/// `spec.extensions.helm.charts[]` whose `chartname` names the chart, or whose `values` (a YAML
/// string) hold the chart's values under its subchart key (an umbrella chart).
///
/// Finding an umbrella key parses a values string, and every rule that reads the chart's
/// values finds the places again: more than [`MAX_CARRIERS_PER_OBJECT`] strings that would
/// be parsed (they mention a chart name) are not parsed at all, each is taken as a place, so
/// the object is reported over the carrier limit instead of costing dozens of parses per
/// rule.
fn k0s_places(root: &Value, charts: &[String], at: &[&str], cancel: &Cancel) -> Vec<ValuesPlace> {
    let Some(list) = at
        .iter()
        .try_fold(root, |v, k| v.get(k))
        .and_then(|config| config.pointer("/spec/extensions/helm/charts"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let parsed = |chart: &Value| {
        chart
            .get("values")
            .and_then(Value::as_str)
            .is_some_and(|t| {
                t.len() <= MAX_VALUES_TEXT_BYTES && super::payload::mentions(t, charts)
            })
    };
    let too_many = list.iter().filter(|chart| parsed(chart)).count() > MAX_CARRIERS_PER_OBJECT;
    let mut out = Vec::new();
    for (i, chart) in list.iter().enumerate() {
        if cancel.is_cancelled() {
            break;
        }
        let ours = chart
            .get("chartname")
            .and_then(Value::as_str)
            .is_some_and(|c| chart_matches(c, charts));
        let mut path = keys(at);
        path.extend(keys(&["spec", "extensions", "helm", "charts"]));
        path.push(Seg::Index(i));
        path.push(Seg::key("values"));
        // An umbrella chart whose values hold the CCM chart's under its subchart key; past
        // the carrier cap nothing more is parsed.
        let alias = if out.len() > MAX_CARRIERS_PER_OBJECT || too_many {
            None
        } else {
            umbrella_text_alias(chart.get("values"), charts, ours, cancel)
        };
        if !ours && alias.is_none() && !(too_many && parsed(chart)) {
            continue;
        }
        // k0s pins the chart's version in the entry's `version`; an umbrella's subchart
        // version is not named here.
        let version = chart.get("version").and_then(Value::as_str);
        let chartname = chart.get("chartname").and_then(Value::as_str);
        let generations = match alias {
            None => generations_of(chartname, version),
            Some(_) => Generations::ALL,
        };
        let mut place = ValuesPlace {
            path,
            yaml_string: true,
            unseen: Vec::new(),
            unseen_on_top: None,
            chart_unseen: None,
            overrides: None,
            values_over: None,
            alias,
            generations,
            switch: Switch::On,
        };
        if let Some(alias) = &place.alias {
            let values = text_values(chart.get("values"), None, cancel);
            place.switch = unseen_switch(alias, values.as_ref(), root, &place);
        }
        out.push(place);
    }
    out
}

/// kustomize `helmCharts[]` entries naming the chart (`kubectl kustomize --enable-helm`;
/// kubernetes-sigs/kustomize @ 12f9e6391464b3ad9dd3fe8182049dc1b1772990,
/// `api/internal/builtins/HelmChartInflationGenerator.go`): `valuesInline` merged with
/// `valuesFile` (the chart's `values.yaml` when unset) into one values file, the inline values
/// winning (`valuesMerge: override`, the default) or losing (`merge`), or alone (`replace`);
/// then each `additionalValuesFiles` entry as a further `-f`. Files are named as unseen here;
/// `stackgate check` merges them in when they are among its inputs.
fn kustomize_places(root: &Value, charts: &[String]) -> Vec<ValuesPlace> {
    let Some(list) = root.get("helmCharts").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let name = entry.get("name").and_then(Value::as_str);
        if !name.is_some_and(|n| chart_matches(n, charts)) {
            continue;
        }
        let base = vec![Seg::key("helmCharts"), Seg::Index(i)];
        let at = |field: &str| {
            let mut path = base.clone();
            path.push(Seg::key(field));
            path
        };
        let merge = entry
            .get("valuesMerge")
            .and_then(Value::as_str)
            .unwrap_or("override");
        let file_named = entry
            .get("valuesFile")
            .and_then(Value::as_str)
            .is_some_and(|f| !f.is_empty());
        // The values file beneath the inline values (`override`), or over them (`merge`,
        // named on top: nothing here decides); `replace` ignores it.
        let (unseen, file_on_top) = match (merge, file_named) {
            (_, false) | ("replace", _) => (Vec::new(), false),
            ("merge", true) => (Vec::new(), true),
            _ => (vec![at("valuesFile")], false),
        };
        let mut on_top = vec![at("additionalValuesFiles")];
        if file_on_top {
            on_top.insert(0, at("valuesFile"));
        }
        out.push(ValuesPlace {
            path: at("valuesInline"),
            yaml_string: false,
            unseen,
            unseen_on_top: Some(OnTop::AdditionalValuesFiles(on_top)),
            chart_unseen: None,
            overrides: None,
            values_over: None,
            alias: None,
            generations: generations_of(name, entry.get("version").and_then(Value::as_str)),
            switch: Switch::On,
        });
    }
    out
}

/// Whether a text holds Go template syntax (Argo CD ApplicationSet templates, Sveltos values).
fn go_templated(text: &str) -> bool {
    text.contains("{{")
}

/// `place` with every path in it below `prefix` (a place found in a sub-object).
fn prefixed(mut place: ValuesPlace, prefix: &[Seg]) -> ValuesPlace {
    let under = |path: &mut Vec<Seg>| {
        let mut out = prefix.to_vec();
        out.append(path);
        *path = out;
    };
    under(&mut place.path);
    place.unseen.iter_mut().for_each(under);
    match &mut place.unseen_on_top {
        Some(OnTop::FileParameters(p) | OnTop::ValuesSecrets(p, _)) => under(p),
        Some(OnTop::AdditionalValuesFiles(list)) => list.iter_mut().for_each(under),
        None => {}
    }
    match &mut place.overrides {
        Some(OverrideSource::HelmChartSet(p) | OverrideSource::ArgoParameters(p)) => under(p),
        None => {}
    }
    if let Some(p) = &mut place.values_over {
        under(p);
    }
    if let Some((p, _)) = &mut place.chart_unseen {
        under(p);
    }
    place
}

/// Argo CD `ApplicationSet`: its `spec.template` is the Application each generator makes. A
/// template without template syntax (`{{`) and without `spec.templatePatch` makes the same
/// Application for every generated parameter set, so its sources are read as an
/// Application's ([`argo_places`]); one with it that names the chart is named as unseen
/// (each Application may get other values).
fn application_set_places(root: &Value, charts: &[String], cancel: &Cancel) -> Vec<ValuesPlace> {
    let Some(template) = root.pointer("/spec/template").filter(|t| t.is_object()) else {
        return Vec::new();
    };
    let prefix = keys(&["spec", "template"]);
    let text = template.to_string();
    if go_templated(&text) || root.pointer("/spec/templatePatch").is_some() {
        if !super::payload::mentions(&text, charts) {
            return Vec::new();
        }
        return vec![ValuesPlace {
            path: prefix.clone(),
            yaml_string: false,
            unseen: Vec::new(),
            unseen_on_top: None,
            chart_unseen: Some((
                prefix,
                "the Application template spec.template (rendered by the ApplicationSet \
                 controller for each generated Application, and patched by \
                 spec.templatePatch when set)"
                    .to_owned(),
            )),
            overrides: None,
            values_over: None,
            alias: None,
            generations: Generations::ALL,
            switch: Switch::On,
        }];
    }
    argo_places(template, charts, cancel)
        .into_iter()
        .map(|place| prefixed(place, &prefix))
        .collect()
}

/// Sveltos `ClusterProfile` / `Profile` `spec.helmCharts[]` whose `chartName` names the chart:
/// `values` (a string Sveltos renders as a Go template with the cluster's objects) is read as
/// YAML when it holds no template syntax, else named as unseen; `valuesFrom` (ConfigMaps and
/// Secrets) is named as unseen over it.
fn sveltos_places(root: &Value, charts: &[String]) -> Vec<ValuesPlace> {
    let Some(list) = root.pointer("/spec/helmCharts").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, entry) in list.iter().enumerate() {
        let name = entry.get("chartName").and_then(Value::as_str);
        if !name.is_some_and(|n| chart_matches(n, charts)) {
            continue;
        }
        let base = vec![Seg::key("spec"), Seg::key("helmCharts"), Seg::Index(i)];
        let at = |field: &str| {
            let mut path = base.clone();
            path.push(Seg::key(field));
            path
        };
        let templated = entry
            .get("values")
            .and_then(Value::as_str)
            .is_some_and(go_templated);
        out.push(ValuesPlace {
            path: at("values"),
            yaml_string: true,
            unseen: Vec::new(),
            unseen_on_top: Some(OnTop::AdditionalValuesFiles(vec![at("valuesFrom")])),
            chart_unseen: templated.then(|| {
                (
                    at("values"),
                    "a Go template Sveltos renders with each matching cluster's objects".to_owned(),
                )
            }),
            overrides: None,
            values_over: None,
            alias: None,
            generations: generations_of(name, entry.get("chartVersion").and_then(Value::as_str)),
            switch: Switch::On,
        });
    }
    out
}

/// Rancher Fleet: `helm` of a `fleet.yaml` (`at` = `helm`), a `HelmOp` or a `Bundle`
/// (`spec.helm`) whose `chart` names the chart: `values` read; `valuesFiles` and `valuesFrom`
/// named as unseen over them (stackgate does not claim their order), as is every
/// `targetCustomizations[]` (per-cluster overrides) beside `helm`.
fn fleet_places(root: &Value, charts: &[String], at: &[&str]) -> Vec<ValuesPlace> {
    let helm = keys(at);
    let Some(chart) = get(root, &helm)
        .and_then(|h| h.get("chart"))
        .and_then(Value::as_str)
    else {
        return Vec::new();
    };
    if !chart_matches(chart, charts) {
        return Vec::new();
    }
    let field = |f: &str| {
        let mut path = helm.clone();
        path.push(Seg::key(f));
        path
    };
    let mut customisations = helm.clone();
    customisations.pop();
    customisations.push(Seg::key("targetCustomizations"));
    let version = get(root, &field("version")).and_then(Value::as_str);
    vec![ValuesPlace {
        path: field("values"),
        yaml_string: false,
        unseen: Vec::new(),
        unseen_on_top: Some(OnTop::AdditionalValuesFiles(vec![
            field("valuesFiles"),
            field("valuesFrom"),
            customisations,
        ])),
        chart_unseen: None,
        overrides: None,
        values_over: None,
        alias: None,
        generations: generations_of(Some(chart), version),
        switch: Switch::On,
    }]
}

/// Argo CD: `spec.source` and each `spec.sources[]` whose chart (or path) names the chart;
/// `helm.valuesObject` (also when neither is set: that is where values would go), else
/// `helm.values` (a YAML string).
fn argo_places(root: &Value, charts: &[String], cancel: &Cancel) -> Vec<ValuesPlace> {
    let mut out = Vec::new();
    let mut sources: Vec<Vec<Seg>> = Vec::new();
    if root.pointer("/spec/source").is_some_and(Value::is_object) {
        sources.push(keys(&["spec", "source"]));
    }
    if let Some(list) = root.pointer("/spec/sources").and_then(Value::as_array) {
        sources.extend(
            (0..list.len()).map(|i| vec![Seg::key("spec"), Seg::key("sources"), Seg::Index(i)]),
        );
    }
    let many_sources = sources.len() > MAX_CARRIERS_PER_OBJECT;
    for base in sources {
        if cancel.is_cancelled() {
            break;
        }
        let Some(source) = get(root, &base) else {
            continue;
        };
        let chart = source
            .get("chart")
            .and_then(Value::as_str)
            .or_else(|| source.get("path").and_then(Value::as_str));
        let ours = chart.is_some_and(|c| chart_matches(c, charts));
        let helm = source.get("helm");
        let mut parameters = base.clone();
        parameters.extend(keys(&["helm", "parameters"]));
        let mut value_files = base.clone();
        value_files.extend(keys(&["helm", "valueFiles"]));
        let mut file_parameters = base.clone();
        file_parameters.extend(keys(&["helm", "fileParameters"]));
        let values_object = helm.and_then(|h| h.get("valuesObject"));
        if let Some(alias) = subchart_alias(values_object, charts, ours) {
            let mut path = base.clone();
            path.extend(keys(&["helm", "valuesObject", &alias]));
            let mut place = ValuesPlace {
                path,
                yaml_string: false,
                unseen: vec![value_files],
                unseen_on_top: Some(OnTop::FileParameters(file_parameters)),
                chart_unseen: None,
                overrides: Some(OverrideSource::ArgoParameters(parameters)),
                values_over: None,
                alias: Some(alias.clone()),
                generations: Generations::ALL,
                switch: Switch::On,
            };
            place.switch = unseen_switch(&alias, values_object, root, &place);
            out.push(place);
            continue;
        }
        let values_text = helm
            .filter(|h| h.get("valuesObject").is_none_or(Value::is_null))
            .and_then(|h| h.get("values"));
        // Past the carrier cap nothing is read, so no string is parsed to find out more.
        let text_alias = if many_sources {
            None
        } else {
            umbrella_text_alias(values_text, charts, ours, cancel)
        };
        if let Some(alias) = text_alias {
            let mut path = base.clone();
            path.extend(keys(&["helm", "values"]));
            let mut place = ValuesPlace {
                path,
                yaml_string: true,
                unseen: vec![value_files],
                unseen_on_top: Some(OnTop::FileParameters(file_parameters)),
                chart_unseen: None,
                overrides: Some(OverrideSource::ArgoParameters(parameters)),
                values_over: None,
                alias: Some(alias.clone()),
                generations: Generations::ALL,
                switch: Switch::On,
            };
            let values = text_values(values_text, None, cancel);
            place.switch = unseen_switch(&alias, values.as_ref(), root, &place);
            out.push(place);
            continue;
        }
        if !ours {
            continue;
        }
        let has = |field: &str| {
            helm.and_then(|h| h.get(field))
                .is_some_and(|v| !v.is_null())
        };
        let with = |field: &str, yaml_string| {
            let mut path = base.clone();
            path.extend(keys(&["helm", field]));
            ValuesPlace {
                path,
                yaml_string,
                unseen: vec![value_files.clone()],
                unseen_on_top: Some(OnTop::FileParameters(file_parameters.clone())),
                chart_unseen: None,
                overrides: Some(OverrideSource::ArgoParameters(parameters.clone())),
                values_over: None,
                alias: None,
                switch: Switch::On,
                generations: generations_of(
                    chart,
                    source.get("targetRevision").and_then(Value::as_str),
                ),
            }
        };
        // Argo CD passes one of the two to Helm: `valuesObject` when it is set, else the
        // `values` string (`ApplicationSourceHelm.ValuesYAML`), so `values` beside a
        // `valuesObject` is ignored and is not read.
        if has("valuesObject") || !has("values") {
            out.push(with("valuesObject", false));
        } else {
            out.push(with("values", true));
        }
    }
    out
}

/// The object description used in messages: `HelmRelease kube-system/occm`, or
/// `values file clusters/a/values.yaml` for a plain values file.
pub fn object_name(gvk: &GroupVersionKind, object: &DynamicObject) -> String {
    let name = object.metadata.name.as_deref().unwrap_or("");
    if is_values_file(gvk) {
        return format!("values file {name}");
    }
    match object.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{} {ns}/{name}", gvk.kind),
        _ => format!("{} {name}", gvk.kind),
    }
}

/// Finds the cloud configs in the values of the charts in `charts` that `object` holds.
pub(super) fn find(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let object_name = object_name(gvk, object);
    let places = values_places(gvk, object, charts, cancel);
    if places.len() > MAX_CARRIERS_PER_OBJECT {
        // Each values string is parsed with caps of its own; an object with hundreds of them
        // would multiply those caps. None is read, and the object is reported instead (named
        // as a `cloudConfigContents` at the root, as nothing finer is known).
        let location = display(&keys(&["spec", "sources"]));
        let text = Err(SiteError::TooManyCarriers {
            location: location.clone(),
            count: places.len(),
            limit: MAX_CARRIERS_PER_OBJECT,
        });
        let contents = "cloudConfigContents";
        let carrier = TextField::new(keys(&[contents]), contents.to_owned(), Holder::HelmValues);
        return vec![FoundConfig::new(object_name, location, text, carrier)];
    }
    let root = content(object);
    let values_file = is_values_file(gvk);
    let mut found = Vec::new();
    for (group, place) in places.into_iter().enumerate() {
        // Each place parses and merges its values: none is started once the flag fired.
        if cancel.is_cancelled() {
            break;
        }
        found.extend(read(&object_name, root, place, values_file, group, cancel));
    }
    if let Some(site) = post_rendered(gvk, root, &object_name, &found) {
        found.push(site);
    }
    found
}

/// The site that says a Flux HelmRelease's `spec.postRenderers` change what the chart renders
/// from the values stackgate read (`found`): Flux runs them over the rendered manifests (a
/// kustomize `patches`, `images`, … stack), so the cloud-config Secret and the CCM DaemonSet
/// the CCM gets may differ from what the values render. None without post-renderers, or when
/// no values of the chart were found (stackgate then claims nothing about the release).
fn post_rendered(
    gvk: &GroupVersionKind,
    root: &Value,
    object_name: &str,
    found: &[FoundConfig],
) -> Option<FoundConfig> {
    if gvk.group != "helm.toolkit.fluxcd.io" || found.is_empty() {
        return None;
    }
    let list = root.pointer("/spec/postRenderers")?.as_array()?;
    if list.is_empty() {
        return None;
    }
    // `kustomize.patches`, `kustomize.images`: what each post-renderer does, by field name.
    let mut kinds: Vec<String> = Vec::new();
    for renderer in list.iter().take(4).filter_map(Value::as_object) {
        for (kind, spec) in renderer {
            match spec.as_object() {
                Some(fields) if !fields.is_empty() => kinds.extend(
                    fields
                        .keys()
                        .take(4)
                        .map(|f| format!("{}.{}", shown_entry(kind), shown_entry(f))),
                ),
                _ => kinds.push(shown_entry(kind)),
            }
        }
    }
    let at = keys(&["spec", "postRenderers"]);
    let location = display(&at);
    let error = SiteError::PostRendered {
        location: location.clone(),
        renderers: format!("{} post-renderer(s): {}", list.len(), kinds.join(", ")),
    };
    let mut site = FoundConfig::new(
        object_name.to_owned(),
        location,
        Err(error),
        UnseenValues { path: at },
    );
    site.mutable = false;
    Some(site)
}

/// Reads the values at `place` and finds the cloud config in them (none when the chart would
/// render no Secret).
///
/// Argo CD hands its parameters to Helm in no fixed order within `--set` and within
/// `--set-string` ([`argo_orders`]): when two of them set the same value, the values are read
/// once per order that lets a different one win, so a denial holds whichever Helm gets.
fn read(
    object_name: &str,
    root: &Value,
    place: ValuesPlace,
    values_file: bool,
    group: usize,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let generations = place.generations;
    let switch = match &place.switch {
        Switch::On => None,
        Switch::Unseen(why) => Some(why.clone()),
    };
    let mut readings: Vec<(Option<Generation>, Vec<FoundConfig>)> = Vec::new();
    if switch.is_some() {
        // Switched off, the subchart renders nothing; Helm still reads every `--set` entry
        // into the umbrella's values first, so one it cannot read stops it either way.
        let off = match place_overrides(root, &place, cancel) {
            Ok(_) => Vec::new(),
            Err(failure) => vec![failure.site(object_name.to_owned())],
        };
        readings.push((None, off));
    }
    for generation in generations.iter() {
        if cancel.is_cancelled() {
            break;
        }
        let mut found = read_as(
            object_name,
            root,
            place.clone(),
            values_file,
            generation,
            cancel,
        );
        if generation == Generation::Unquoted {
            for site in &mut found {
                if site.carrier.writes_lines_of_a_value() {
                    site.mutable = false;
                    site.note = Some(UNQUOTED_LINE_BREAK_NOTE.to_owned());
                }
            }
        }
        readings.push((Some(generation), found));
    }
    alternatives(readings, group, switch)
}

/// Why a config chart versions 1.0.0–1.3.0 and 2.24.0 render is not edited when a value
/// writes lines of its own.
const UNQUOTED_LINE_BREAK_NOTE: &str = "a cloudConfig value holds a line break, which chart \
     versions 1.0.0–1.3.0 and 2.24.0 write unquoted, as lines of their own; setting a key \
     cannot undo such a line, so remove the line break";

/// The readings of one place, one per generation its version allows (and one with the
/// subchart switched off, `None`, when an umbrella's switch is unseen: `switch` says what could
/// switch it), as the sites to check: the newest generation's when every reading is the same
/// config (or none), else one alternative per distinct reading ([`super::Alternative`],
/// numbered `group`), each naming the chart versions that read it so. The engine denies only
/// what every alternative denies.
fn alternatives(
    mut readings: Vec<(Option<Generation>, Vec<FoundConfig>)>,
    group: usize,
    switch: Option<String>,
) -> Vec<FoundConfig> {
    // Distinct readings: (generations, sites), in the order first seen.
    let mut classes: Vec<(Vec<Generation>, Vec<FoundConfig>)> = Vec::new();
    for (generation, found) in readings.drain(..) {
        match classes
            .iter_mut()
            .find(|(_, sites)| same_reading(sites, &found))
        {
            Some((generations, sites)) => {
                generations.extend(generation);
                // The newest generation's sites stand for the class.
                *sites = found;
            }
            None => classes.push((generation.into_iter().collect(), found)),
        }
    }
    if classes.len() <= 1 {
        return classes.pop().map(|(_, sites)| sites).unwrap_or_default();
    }
    let of = classes.len();
    let by_version = classes.iter().filter(|(g, _)| !g.is_empty()).count() > 1;
    let mut out = Vec::new();
    for (class, (generations, sites)) in classes.into_iter().enumerate() {
        let versions = super::generation::versions_of(&generations);
        for mut site in sites {
            site.alternative = Some(super::Alternative {
                group,
                class,
                of,
                versions: versions.clone(),
                generations: generations.clone(),
                by_version,
                switch: switch.clone(),
            });
            out.push(site);
        }
    }
    out
}

/// Whether two readings are the same config in the same places: the same sites, each at the
/// same location and field, with texts gcfg reads alike (quoting aside) or the same error.
fn same_reading(a: &[FoundConfig], b: &[FoundConfig]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.location == b.location
                && a.pointer() == b.pointer()
                && a.mutable == b.mutable
                && match (&a.text, &b.text) {
                    (Ok(x), Ok(y)) => x == y || super::same_settings(x, y),
                    (Err(x), Err(y)) => x == y,
                    _ => false,
                }
        })
}

/// [`read`] as the chart's `generation` renders the values.
fn read_as(
    object_name: &str,
    root: &Value,
    place: ValuesPlace,
    values_file: bool,
    generation: Generation,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let overrides = place_overrides(root, &place, cancel);
    let argo = matches!(place.overrides, Some(OverrideSource::ArgoParameters(_)));
    match overrides {
        Ok(overrides) if argo => argo_orders(overrides)
            .into_iter()
            .take_while(|_| !cancel.is_cancelled())
            .filter_map(|order| {
                read_ordered(
                    object_name,
                    root,
                    place.clone(),
                    values_file,
                    Ok(order),
                    generation,
                    cancel,
                )
            })
            .collect(),
        overrides => read_ordered(
            object_name,
            root,
            place,
            values_file,
            overrides,
            generation,
            cancel,
        )
        .into_iter()
        .collect(),
    }
}

/// [`read`] with the `--set`-like entries in the order Helm applies them.
fn read_ordered(
    object_name: &str,
    root: &Value,
    place: ValuesPlace,
    values_file: bool,
    overrides: Result<Vec<Override>, SetFailure>,
    generation: Generation,
    cancel: &Cancel,
) -> Option<FoundConfig> {
    let existing = existing_segments(root, &place.path);
    let raw = (existing == place.path.len())
        .then(|| get(root, &place.path))
        .flatten();
    let field = display(&place.path);
    // How messages name a path inside the values: a values file's values are the file.
    let prefix = match (values_file, place.yaml_string) {
        (true, _) if place.path.len() > 1 => format!("{}.", display(&place.path[1..])),
        (true, _) => String::new(),
        (false, true) => match &place.alias {
            Some(alias) => format!("{field}, {alias}."),
            None => format!("{field}, "),
        },
        (false, false) => format!("{field}."),
    };
    let at = ValuesAt {
        path: place.path,
        existing,
        prefix,
    };
    let object = object_name.to_owned();
    let overrides = match overrides {
        Ok(overrides) => overrides,
        Err(failure) => return Some(failure.site(object)),
    };
    if let Some((at, chart)) = &place.chart_unseen {
        // Which templates render these values (and which defaults they start from) is not
        // known: nothing here decides.
        return Some(unseen_site(object, at, chart.clone()));
    }
    if let Some((at, sources)) =
        on_top_sources(root, place.unseen_on_top.as_ref(), place.alias.as_deref())
    {
        // Helm reads these after the values here: nothing here decides.
        return Some(unseen_site(object, &at, sources));
    }
    if let Some((references, sources)) = unseen_sources(root, &place.unseen) {
        // The values here are merged over the unseen ones: they decide alone only with
        // `cloudConfigContents` or the Secret switched off.
        let top = if place.yaml_string {
            text_values(raw, place.alias.as_deref(), cancel)
        } else {
            Some(raw.cloned().unwrap_or(Value::Null))
        };
        if let Some(top) = top {
            let merged = match merged_with(&top, &overrides, cancel) {
                Ok(merged) => merged,
                Err(failure) => return Some(failure.site(object)),
            };
            if !renders_secret(&merged, generation) {
                return None;
            }
            if contents(&merged, generation).is_none() {
                return Some(unseen_site(object, &references, sources));
            }
        }
    }
    if place.yaml_string {
        let subchart = place.alias.as_deref();
        return read_values_text(
            object, at, field, raw, overrides, subchart, generation, cancel,
        );
    }
    let values = raw.cloned().unwrap_or(Value::Null);
    if !overrides.is_empty() {
        let merged = match merged_with(&values, &overrides, cancel) {
            Ok(merged) => merged,
            Err(failure) => return Some(failure.site(object)),
        };
        return renders_secret(&merged, generation).then(|| {
            let beneath = Beneath::Map(at, values);
            in_values_over(object, beneath, merged, overrides, generation, cancel)
        });
    }
    renders_secret(&values, generation)
        .then(|| in_values_map(object, at, values, generation, cancel))
}

/// The site that says values come from `sources`, named at `references`, which this run
/// cannot see: nothing is rendered or edited.
fn unseen_site(object: String, references: &[Seg], sources: String) -> FoundConfig {
    let location = display(references);
    let error = SiteError::Unseen {
        location: location.clone(),
        sources,
    };
    let carrier = UnseenValues {
        path: references.to_vec(),
    };
    FoundConfig::new(object, location, Err(error), carrier)
}

/// Of the fields in `references` (a Flux `spec.valuesFrom` list, `spec.chart.spec.valuesFiles`
/// list or `valuesFile` string, an Argo CD `helm.valueFiles` list), the first that names any
/// values, and what messages say all of them name.
fn unseen_sources(root: &Value, references: &[Vec<Seg>]) -> Option<(Vec<Seg>, String)> {
    let mut first = None;
    let mut said = Vec::new();
    for path in references {
        let Some(sources) = unseen_sources_at(root, path) else {
            continue;
        };
        first.get_or_insert_with(|| path.clone());
        said.push(sources);
    }
    Some((first?, said.join("; ")))
}

/// What messages say the field at `references` names, when it names any values.
fn unseen_sources_at(root: &Value, references: &[Seg]) -> Option<String> {
    let field = get(root, references)?;
    let last = match references.last() {
        Some(Seg::Key(k)) => k.as_str(),
        _ => "",
    };
    if last == "valuesFile" {
        let file = field.as_str().filter(|f| !f.is_empty())?;
        if matches!(references.first(), Some(Seg::Key(k)) if k == "helmCharts") {
            // kustomize: a file relative to the kustomization.
            return Some(format!(
                "values file {} of the kustomization",
                shown_entry(file)
            ));
        }
        // Flux's deprecated single values file of the chart source.
        return Some(format!(
            "values file {} of the chart source",
            shown_entry(file)
        ));
    }
    let list = field.as_array()?;
    if list.is_empty() {
        return None;
    }
    let files = || {
        list.iter()
            .filter_map(Value::as_str)
            .map(shown_entry)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match last {
        "valueFiles" => {
            let source = display(&references[..references.len().saturating_sub(2)]);
            Some(format!("value files {} of {source}", files()))
        }
        // Flux: files of the chart source that replace the chart's own values.yaml.
        "valuesFiles" => Some(format!("values files {} of the chart source", files())),
        _ => values_from_sources(root),
    }
}

/// Where the unseen values set on top of a place are named and what messages say of them; None
/// when there are none (or, for Argo CD file parameters, none sets the cloud config).
fn on_top_sources(
    root: &Value,
    on_top: Option<&OnTop>,
    alias: Option<&str>,
) -> Option<(Vec<Seg>, String)> {
    match on_top? {
        OnTop::FileParameters(parameters) => {
            file_parameters_touching(root, parameters, alias).map(|s| (parameters.clone(), s))
        }
        OnTop::AdditionalValuesFiles(fields) => {
            let mut first = None;
            let mut files: Vec<String> = Vec::new();
            for at in fields {
                let named: Vec<String> = match get(root, at) {
                    Some(Value::String(file)) if !file.is_empty() => vec![shown_entry(file)],
                    Some(Value::Array(list)) => list.iter().map(describe_named).collect(),
                    _ => Vec::new(),
                };
                if !named.is_empty() {
                    first.get_or_insert_with(|| at.clone());
                    files.extend(named);
                }
            }
            let first = first?;
            let field = display(&first);
            Some((first, format!("{} ({field})", files.join(", "))))
        }
        OnTop::ValuesSecrets(at, name) => values_secrets(root, at, name).map(|s| (at.clone(), s)),
    }
}

/// What messages say of the RKE2/k3s `spec.valuesSecrets` at `at` that helm-controller mounts
/// of the object `name` (`Secret occm-values keys values.yaml, extra.yaml`), None when it
/// mounts none. An entry
/// without keys, or naming the object's own `chart-values-<name>` Secret, is skipped as
/// helm-controller skips it (k3s-io/helm-controller @ 21a911f, `pkg/controllers/chart/chart.go`,
/// the `ValuesSecrets` loops of `args`/`valuesSecretAddConfig`); `ignoreUpdates` makes the
/// Secret optional. Names only, never content.
fn values_secrets(root: &Value, at: &[Seg], name: &str) -> Option<String> {
    let own = format!("chart-values-{name}");
    let said: Vec<String> = helm_controller_secrets(get(root, at)?, &own)
        .map(|(name, keys, optional)| {
            let keys: Vec<String> = keys.iter().map(|k| shown_entry(k)).collect();
            let plural = if keys.len() == 1 { "key" } else { "keys" };
            format!(
                "Secret {} {plural} {}{}",
                shown_entry(name),
                keys.join(", "),
                if optional { " (optional)" } else { "" }
            )
        })
        .collect();
    (!said.is_empty()).then(|| said.join(", "))
}

/// The entries of a helm-controller `valuesSecrets` list that are mounted: (Secret name, keys in
/// order, whether optional). Entries without keys and the object's own Secret (`own`) are not.
pub fn helm_controller_secrets<'a>(
    list: &'a Value,
    own: &'a str,
) -> impl Iterator<Item = (&'a str, Vec<&'a str>, bool)> + 'a {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(move |entry| {
            let name = entry.get("name").and_then(Value::as_str).unwrap_or("");
            let keys: Vec<&str> = entry
                .get("keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let optional = entry.get("ignoreUpdates").and_then(Value::as_bool) == Some(true);
            (!keys.is_empty() && name != own).then_some((name, keys, optional))
        })
}

/// What messages say of the Argo CD `helm.fileParameters` at `parameters` that set the CCM
/// chart's cloud config (`cloudConfig…` or `cloudConfigContents`, below the subchart key
/// `alias` when set) from files this run cannot see; None when none does. A name Helm's parser
/// cannot read is counted as one that does (Helm would stop on it).
fn file_parameters_touching(
    root: &Value,
    parameters: &[Seg],
    alias: Option<&str>,
) -> Option<String> {
    let list = get(root, parameters)?.as_array()?;
    let mut named = Vec::new();
    for parameter in list {
        let Some(name) = parameter.get("name").and_then(Value::as_str) else {
            continue;
        };
        let path = parameter.get("path").and_then(Value::as_str).unwrap_or("");
        let assigned = strvals::parse_into(
            &format!("{name}=x"),
            &mut serde_json::Map::new(),
            Typing::Strings,
        );
        let touches = match assigned {
            Err(_) => true,
            Ok(assigned) => assigned.iter().any(|a| {
                let keys = match alias {
                    Some(alias) => match a.path.split_first() {
                        Some((Seg::Key(k), rest)) if k == alias => rest,
                        _ => return false,
                    },
                    None => a.path.as_slice(),
                };
                matches!(keys.first(), Some(Seg::Key(k)) if k == "cloudConfig" || k == "cloudConfigContents")
            }),
        };
        if touches {
            named.push(format!("{} from {}", shown_entry(name), shown_entry(path)));
        }
    }
    if named.is_empty() {
        return None;
    }
    let source = display(&parameters[..parameters.len().saturating_sub(2)]);
    Some(format!(
        "files set with --set-file ({}) of {source}",
        named.join(", ")
    ))
}

/// The references of a HelmRelease's `spec.valuesFrom`, for messages (None when it has none).
fn values_from_sources(root: &Value) -> Option<String> {
    let list = root.pointer("/spec/valuesFrom")?.as_array()?;
    if list.is_empty() {
        return None;
    }
    Some(
        list.iter()
            .map(describe_values_reference)
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// An entry of a list naming values elsewhere, as messages name it (names only, never
/// content): a file name, `ConfigMap NAME key KEY` / `Secret NAME key KEY` (Fleet's
/// `configMapKeyRef` / `secretKeyRef`), `KIND NAME` (Sveltos' `valuesFrom`), a per-cluster
/// customisation by its `name`, else `an entry`.
fn describe_named(entry: &Value) -> String {
    if let Some(file) = entry.as_str() {
        return shown_entry(file);
    }
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(shown_entry);
    for (field, kind) in [("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")] {
        if let Some(reference) = entry.get(field) {
            let name = text(reference, "name").unwrap_or_default();
            return match text(reference, "key") {
                Some(key) => format!("{kind} {name} key {key}"),
                None => format!("{kind} {name}"),
            };
        }
    }
    match (text(entry, "kind"), text(entry, "name")) {
        (Some(kind), Some(name)) => format!("{kind} {name}"),
        (None, Some(name)) => format!("customisation {name}"),
        _ => "an entry".to_owned(),
    }
}

/// One Flux `valuesFrom` reference as messages name it: `Secret occm-values key values.yaml`,
/// with ` at <targetPath>` and ` (optional)` when set. Names only, never content.
pub fn describe_values_reference(reference: &Value) -> String {
    let field = |k: &str| reference.get(k).and_then(Value::as_str);
    let mut out = format!(
        "{} {} key {}",
        field("kind").unwrap_or("object"),
        field("name").unwrap_or("<unnamed>"),
        field("valuesKey").unwrap_or(FLUX_DEFAULT_VALUES_KEY)
    );
    if let Some(target) = field("targetPath").filter(|t| !t.is_empty()) {
        out.push_str(&format!(" at {target}"));
    }
    if reference.get("optional").and_then(Value::as_bool) == Some(true) {
        out.push_str(" (optional)");
    }
    out
}

/// The data key Flux reads when a `valuesFrom` reference names none.
pub const FLUX_DEFAULT_VALUES_KEY: &str = "values.yaml";

/// Reads a YAML values string (`raw`, absent when the field is) named `field` in messages.
// The values string, where it is, what is set on top and how the chart reads it: each
// argument is one of those, and bundling them would only rename them.
#[allow(clippy::too_many_arguments)]
fn read_values_text(
    object: String,
    at: ValuesAt,
    field: String,
    raw: Option<&Value>,
    overrides: Vec<Override>,
    subchart: Option<&str>,
    generation: Generation,
    cancel: &Cancel,
) -> Option<FoundConfig> {
    let yaml = match raw {
        None => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            let location = field.clone();
            let error = SiteError::NotAString { location };
            return Some(unread_values_text(object, at, field, error));
        }
    };
    if yaml.len() > MAX_VALUES_TEXT_BYTES {
        let error = SiteError::TooLarge {
            location: field.clone(),
            size: yaml.len(),
            limit: MAX_VALUES_TEXT_BYTES,
        };
        return Some(unread_values_text(object, at, field, error));
    }
    let yaml = yaml.to_owned();
    // Under an umbrella chart, the CCM's values are those under its subchart key.
    let text_of = |at: ValuesAt, yaml: String, values: Value| match subchart {
        Some(key) => ValuesText::new(at, yaml, values).under(key),
        None => ValuesText::new(at, yaml, values),
    };
    let parsed = yaml::parse_one_within(&yaml, cancel)
        .and_then(|n| n.to_json())
        .map(|values| match subchart {
            Some(key) => values.get(key).cloned().unwrap_or(Value::Null),
            None => values,
        });
    match parsed {
        Ok(values) if !overrides.is_empty() => {
            let merged = match merged_with(&values, &overrides, cancel) {
                Ok(merged) => merged,
                Err(failure) => return Some(failure.site(object)),
            };
            renders_secret(&merged, generation).then(|| {
                let beneath = Beneath::Text(text_of(at, yaml, values));
                in_values_over(object, beneath, merged, overrides, generation, cancel)
            })
        }
        Ok(values) => renders_secret(&values, generation)
            .then(|| in_values_text(object, text_of(at, yaml, values), generation, cancel)),
        Err(error) => {
            let location = field.clone();
            let error = SiteError::Yaml { location, error };
            let text = text_of(at, yaml, Value::Null);
            Some(FoundConfig::new(
                object,
                field,
                Err(error),
                ValuesTextContents { text },
            ))
        }
    }
}

/// A values string stackgate does not parse (not a string, or too large). Nothing in it is
/// known, so messages and pointers name it like `cloudConfigContents` in a values map.
fn unread_values_text(
    object: String,
    at: ValuesAt,
    field: String,
    error: SiteError,
) -> FoundConfig {
    let location = format!("{field}.cloudConfigContents");
    let mut path = at.path;
    path.push(Seg::key("cloudConfigContents"));
    let carrier = TextField::new(path, location, Holder::HelmValues);
    FoundConfig::new(object, field, Err(error), carrier)
}

/// The cloud config in structured values: `cloudConfigContents` when set (a string field of
/// the object), else `cloudConfig` rendered.
fn in_values_map(
    object: String,
    at: ValuesAt,
    values: Value,
    generation: Generation,
    cancel: &Cancel,
) -> FoundConfig {
    if let Some(contents) = contents(&values, generation) {
        let location = at.name("cloudConfigContents");
        let mut path = at.path;
        path.push(Seg::key("cloudConfigContents"));
        return TextField::found(object, path, location, contents, Holder::HelmValues);
    }
    let location = at.name("cloudConfig");
    let (text, origins) = render_cloud_config(&values, &location, generation, cancel);
    let carrier = RenderedValues {
        at,
        values,
        origins,
    };
    FoundConfig::new(object, location, text, carrier)
}

/// The cloud config in a values string: `cloudConfigContents` when set, else `cloudConfig`
/// rendered.
pub(super) fn in_values_text(
    object: String,
    text: ValuesText,
    generation: Generation,
    cancel: &Cancel,
) -> FoundConfig {
    if let Some(contents) = contents(&text.values, generation) {
        let location = text.at.name("cloudConfigContents");
        let ini = match contents {
            Value::String(ini) => Ok(ini.clone()),
            _ => Err(SiteError::NotAString {
                location: location.clone(),
            }),
        };
        return FoundConfig::new(object, location, ini, ValuesTextContents { text });
    }
    let location = text.at.name("cloudConfig");
    let (ini, origins) = render_cloud_config(&text.values, &location, generation, cancel);
    FoundConfig::new(object, location, ini, ValuesTextRendered { text, origins })
}

/// The values that `--set`-like overrides apply on top of.
enum Beneath {
    /// Structured values in the object.
    Map(ValuesAt, Value),
    /// A YAML values string.
    Text(ValuesText),
}

/// A `--set`-like entry Helm's parser cannot read, or cannot apply to the values beneath.
#[derive(Debug)]
struct SetFailure {
    /// How messages name the entry.
    name: String,
    /// Path of the entry's value in the object.
    value_path: Vec<Seg>,
    /// What Helm's parser objects to.
    error: StrvalsError,
}

impl SetFailure {
    fn of(o: &Override, error: StrvalsError) -> Self {
        SetFailure {
            name: o.name.clone(),
            value_path: o.value_path.clone(),
            error,
        }
    }

    /// The site that says what the chart renders is not known (nothing to edit).
    fn site(self, object: String) -> FoundConfig {
        let error = match self.error {
            // Helm would read these; stackgate stops at its own limit.
            StrvalsError::OverLimit(limit) => SiteError::SetTooLarge {
                location: self.name.clone(),
                limit,
            },
            error => SiteError::SetEntry {
                location: self.name.clone(),
                error,
            },
        };
        let carrier = UnseenValues {
            path: self.value_path,
        };
        FoundConfig::new(object, self.name, Err(error), carrier)
    }
}

/// The `--set`-like entries of `place` in the order Helm applies them, each read with Helm's
/// `strvals` parser. Below an umbrella chart's subchart key, entries under that key are kept,
/// scoped to it (each applied whole at the umbrella's root: the override's `scope`),
/// and others (another subchart's) dropped. An entry Helm cannot read, or one that sets the
/// subchart's key itself or keys outside it together with keys under it, is a failure: what
/// the chart renders is then not known.
fn place_overrides(
    root: &Value,
    place: &ValuesPlace,
    cancel: &Cancel,
) -> Result<Vec<Override>, SetFailure> {
    let mut out = match &place.values_over {
        Some(path) => values_file_entries(root, path, place.alias.as_deref(), cancel)?,
        None => Vec::new(),
    };
    if let Some(source) = &place.overrides {
        out.extend(overrides_of(root, source, cancel)?);
    }
    if let Some(alias) = &place.alias {
        let mut kept = Vec::new();
        for mut o in out {
            let under =
                |p: &Vec<Seg>| p.len() > 1 && matches!(p.first(), Some(Seg::Key(k)) if k == alias);
            if !o.touches(alias) {
                continue;
            }
            if !o.paths.iter().all(under) {
                return Err(SetFailure::of(&o, StrvalsError::WrongType));
            }
            // The line stays whole: Helm reads it at the umbrella's root, so a second
            // assignment hidden in it (`<sub>.a=1,<sub>.cloudConfig...=x`) lands under the
            // subchart key too (helm/helm `pkg/cli/values/options.go` `MergeValues` parses
            // each --set entry into the release's values, which are the umbrella's).
            o.scope = Some(alias.clone());
            for p in &mut o.paths {
                p.remove(0);
            }
            kept.push(o);
        }
        out = kept;
    }
    Ok(out)
}

/// The keys of the chart's values a structured values file can change the cloud config
/// through (what [`values_file_entries`] reads of it).
const CLOUD_CONFIG_KEYS: &[&str] = &["cloudConfig", "cloudConfigContents", "secret"];

/// A structured values file (HelmChart `spec.values`) merged over the values beneath, as
/// `--set` entries that set each of its leaves under [`CLOUD_CONFIG_KEYS`] (below the
/// subchart key `alias` when set): Helm's merge of a values file replaces leaves and merges
/// maps, which is what setting each leaf does. A leaf's line carries its value exactly (keys
/// and values escaped for Helm's parser; strings as `--set-string`, other scalars typed).
fn values_file_entries(
    root: &Value,
    path: &[Seg],
    alias: Option<&str>,
    cancel: &Cancel,
) -> Result<Vec<Override>, SetFailure> {
    let mut out = Vec::new();
    let Some(values) = get(root, path).and_then(Value::as_object) else {
        return Ok(out);
    };
    let base: Vec<String> = alias.map(|a| vec![a.to_owned()]).unwrap_or_default();
    let scope = match alias {
        Some(alias) => values.get(alias).and_then(Value::as_object),
        None => Some(values),
    };
    let Some(scope) = scope else {
        return Ok(out);
    };
    let mut budget = SetBudget::new(cancel.clone());
    // (keys from the values root, value): an explicit stack, no recursion.
    let mut stack: Vec<(Vec<Seg>, &Value)> = CLOUD_CONFIG_KEYS
        .iter()
        .rev()
        .filter_map(|k| scope.get(*k).map(|v| (vec![Seg::key(k)], v)))
        .collect();
    while let Some((keys_here, value)) = stack.pop() {
        let mut full: Vec<Seg> = base.iter().map(|k| Seg::key(k)).collect();
        full.extend(keys_here.iter().cloned());
        if full.len() > strvals::MAX_SET_PATH_DEPTH {
            let mut value_path = path.to_vec();
            value_path.extend(full);
            let name = display(&value_path);
            let o = Override {
                line: String::new(),
                scope: None,
                typing: Typing::Typed,
                paths: Vec::new(),
                value_path,
                name,
            };
            return Err(SetFailure::of(
                &o,
                StrvalsError::OverLimit(strvals::SetLimit::Depth),
            ));
        }
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map.iter().rev() {
                    let mut next = keys_here.clone();
                    next.push(Seg::key(k));
                    stack.push((next, v));
                }
                continue;
            }
            Value::Array(list) if !list.is_empty() => {
                for (i, v) in list.iter().enumerate().rev() {
                    let mut next = keys_here.clone();
                    next.push(Seg::Index(i));
                    stack.push((next, v));
                }
                continue;
            }
            _ => {}
        }
        let (typing, text) = match value {
            Value::String(s) => (Typing::Strings, escaped_set_text(s)),
            Value::Object(_) | Value::Array(_) => continue,
            other => (Typing::Typed, other.to_string()),
        };
        let key_text = set_key_text(&full);
        let mut value_path = path.to_vec();
        value_path.extend(full);
        let name = display(&value_path);
        out.push(parsed(
            format!("{key_text}={text}"),
            typing,
            value_path,
            name,
            &mut budget,
        )?);
    }
    Ok(out)
}

/// `path` as a `--set` key: keys joined with `.`, each with `\`, `.`, `[`, `,` and `=`
/// escaped, list indexes as `[i]`.
fn set_key_text(path: &[Seg]) -> String {
    joined(path, escaped_set_text)
}

/// `text` with every character Helm's `--set` parser treats specially escaped with `\`.
fn escaped_set_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '.' | '[' | ']' | ',' | '=' | '{' | '}') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The `--set`-like entries in `source`, each with the values paths it sets, in the order
/// Helm applies them.
///
/// Helm applies every `--set` entry, then every `--set-string` one, whatever their order on
/// the command line (helm/helm `pkg/cli/values/options.go` `MergeValues`, at commit
/// e9b85e4de16ad45805843fb121748018cf89094b and in v3.21.4, 813176c51bb5c181dbbd7901298ddcc104cd3417:
/// values files, `--set-json`, `--set`, `--set-string`, `--set-file`, `--set-literal`).
///
/// * RKE2/k3s helm-controller (k3s-io/helm-controller @ 21a911f86f912a79e06e4f1596c54d8237320e6e,
///   `pkg/controllers/chart/chart.go` `args`, `typedVal`, `escapeComma`): `spec.set` keys in
///   sorted order; an integer, or a string that is `true`, `false` or `null` in any case
///   (`strings.ToLower`), is passed as `--set key=value`; any other string as
///   `--set-string key=value` with its unescaped commas escaped.
/// * Argo CD (argoproj/argo-cd @ 37ee0097cf851bc2dd7665fc081bbce61a7e836e,
///   `reposerver/repository/repository.go` `helmTemplate`, `util/helm/cmd.go` `template`,
///   `cleanSetParameters`): each `helm.parameters` entry goes into a map by name, `--set-string`
///   with `forceString: true`, else `--set` (a later entry of the same name replaces an earlier
///   one), values with commas escaped unless they are a `{...}` list.
fn overrides_of(
    root: &Value,
    source: &OverrideSource,
    cancel: &Cancel,
) -> Result<Vec<Override>, SetFailure> {
    let mut out = Vec::new();
    // One budget for all entries: each is parsed on its own, but together they are one
    // document's growth.
    let mut budget = SetBudget::new(cancel.clone());
    match source {
        OverrideSource::HelmChartSet(path) => {
            let Some(map) = get(root, path).and_then(Value::as_object) else {
                return Ok(out);
            };
            // The map's keys are sorted already (a BTreeMap), as helm-controller sorts them.
            for (key, value) in map {
                let (typing, text) = match value {
                    Value::String(s) if helm_controller_typed(s) => (Typing::Typed, s.clone()),
                    Value::String(s) => {
                        (Typing::Strings, strvals::escape_commas_helm_controller(s))
                    }
                    Value::Number(_) | Value::Bool(_) => (Typing::Typed, value.to_string()),
                    _ => continue,
                };
                let mut value_path = path.clone();
                value_path.push(Seg::key(key));
                let name = format!("{}[\"{}\"]", display(path), shown_entry(key));
                out.push(parsed(
                    format!("{key}={text}"),
                    typing,
                    value_path,
                    name,
                    &mut budget,
                )?);
            }
        }
        OverrideSource::ArgoParameters(path) => {
            let Some(list) = get(root, path).and_then(Value::as_array) else {
                return Ok(out);
            };
            // (typing, name) → the last entry of that name: Argo CD's two maps.
            let mut last: std::collections::HashMap<(bool, &str), usize> =
                std::collections::HashMap::new();
            for (i, parameter) in list.iter().enumerate() {
                let (Some(name), Some(_)) = (
                    parameter.get("name").and_then(Value::as_str),
                    parameter.get("value").and_then(Value::as_str),
                ) else {
                    continue;
                };
                let force = parameter.get("forceString").and_then(Value::as_bool) == Some(true);
                last.insert((force, name), i);
            }
            let mut kept: Vec<usize> = last.into_values().collect();
            kept.sort_unstable();
            for i in kept {
                let parameter = &list[i];
                let (Some(name), Some(value)) = (
                    parameter.get("name").and_then(Value::as_str),
                    parameter.get("value").and_then(Value::as_str),
                ) else {
                    continue;
                };
                // `forceString: true` is `--set-string`; otherwise `--set` types the value.
                let force = parameter.get("forceString").and_then(Value::as_bool) == Some(true);
                let typing = if force {
                    Typing::Strings
                } else {
                    Typing::Typed
                };
                let mut at = path.clone();
                at.push(Seg::Index(i));
                let shown = format!("{} ({})", display(&at), shown_entry(name));
                at.push(Seg::key("value"));
                let line = format!("{name}={}", strvals::escape_commas_argo(value));
                out.push(parsed(line, typing, at, shown, &mut budget)?);
            }
        }
    }
    // Helm's order: every `--set`, then every `--set-string` (a stable sort keeps each
    // group's own order).
    out.sort_by_key(|o| match o.typing {
        Typing::Typed => 0,
        Typing::Strings => 1,
    });
    Ok(out)
}

/// Most orders of Argo CD parameters read for one values carrier ([`argo_orders`]).
const MAX_ARGO_ORDERS: usize = 4;

/// The orders in which Helm may get Argo CD's parameters (already in Helm's group order,
/// `--set` then `--set-string`).
///
/// Argo CD keeps them in two Go maps by name (argoproj/argo-cd @
/// 37ee0097cf851bc2dd7665fc081bbce61a7e836e, `util/helm/cmd.go` `template`: `for key, val :=
/// range opts.Set`), and Go iterates a map in random order: within a group, two parameters
/// whose paths are the same or one inside the other (`a.b` and `a\.b` are not; `a.b` and
/// `a.\b` are) end in either order. One order is returned when no two conflict; else, for each
/// conflicting parameter (up to [`MAX_ARGO_ORDERS`]), the order that applies it last in its
/// group, so each one's value is seen winning.
fn argo_orders(overrides: Vec<Override>) -> Vec<Vec<Override>> {
    use std::collections::HashMap;
    // Each path set, by group, to the first parameter that sets it.
    let mut owner: HashMap<(bool, &[Seg]), usize> = HashMap::new();
    for (i, o) in overrides.iter().enumerate() {
        let group = o.typing == Typing::Strings;
        for p in &o.paths {
            owner.entry((group, p.as_slice())).or_insert(i);
        }
    }
    // Both sides of each clash (a path of one at or below a path another set first).
    let mut conflicting = std::collections::BTreeSet::new();
    for (i, o) in overrides.iter().enumerate() {
        let group = o.typing == Typing::Strings;
        for p in &o.paths {
            for n in 1..=p.len() {
                if let Some(&j) = owner.get(&(group, &p[..n]))
                    && j != i
                {
                    conflicting.insert(i);
                    conflicting.insert(j);
                }
            }
        }
    }
    if conflicting.is_empty() {
        return vec![overrides];
    }
    conflicting
        .into_iter()
        .take(MAX_ARGO_ORDERS)
        .map(|last| {
            let group = overrides[last].typing;
            let mut order: Vec<Override> = Vec::with_capacity(overrides.len());
            for (i, o) in overrides.iter().enumerate() {
                if i != last {
                    order.push(o.clone());
                }
            }
            // After the last of its group.
            let at = order
                .iter()
                .rposition(|o| o.typing == group)
                .map_or(0, |p| p + 1);
            let at = if group == Typing::Strings {
                order.len().max(at)
            } else {
                at
            };
            order.insert(at, overrides[last].clone());
            order
        })
        .collect()
}

/// Whether helm-controller passes a `spec.set` string value as `--set` (typed) rather than
/// `--set-string`: `true`, `false` or `null` in any case (its `typedVal`, which lowercases the
/// string). Integers are typed too, but only when written as numbers: a quoted `"1"` is a
/// string of an `IntOrString`, passed as `--set-string`.
fn helm_controller_typed(value: &str) -> bool {
    matches!(value.to_lowercase().as_str(), "true" | "false" | "null")
}

/// One entry read with Helm's parser (on its own, for the paths it sets and the errors of
/// its syntax; errors that depend on the values beneath come when it is applied).
fn parsed(
    line: String,
    typing: Typing,
    value_path: Vec<Seg>,
    name: String,
    budget: &mut SetBudget,
) -> Result<Override, SetFailure> {
    let mut o = Override {
        line,
        scope: None,
        typing,
        paths: Vec::new(),
        value_path,
        name,
    };
    match strvals::parse_into_within(&o.line, &mut serde_json::Map::new(), typing, budget) {
        Ok(assigned) => {
            o.paths = assigned.into_iter().map(|a| a.path).collect();
            Ok(o)
        }
        Err(error) => Err(SetFailure::of(&o, error)),
    }
}

/// `values` with the overrides applied in order, as Helm applies `--set` over the values
/// files (a values root that is not a map is taken as empty, as Helm refuses it anyway).
fn merged_with(
    values: &Value,
    overrides: &[Override],
    cancel: &Cancel,
) -> Result<Value, SetFailure> {
    let mut merged = match values {
        Value::Object(map) => map.clone(),
        _ => serde_json::Map::new(),
    };
    let mut budget = SetBudget::new(cancel.clone());
    for o in overrides {
        let Some(scope) = &o.scope else {
            strvals::parse_into_within(&o.line, &mut merged, o.typing, &mut budget)
                .map_err(|error| SetFailure::of(o, error))?;
            continue;
        };
        // At the umbrella's root, with the subchart's values under its key; the subchart
        // gets what is under that key afterwards ([`place_overrides`] keeps only lines whose
        // every path is below it).
        let mut root = serde_json::Map::new();
        root.insert(scope.clone(), Value::Object(std::mem::take(&mut merged)));
        strvals::parse_into_within(&o.line, &mut root, o.typing, &mut budget)
            .map_err(|error| SetFailure::of(o, error))?;
        merged = match root.remove(scope) {
            Some(Value::Object(map)) => map,
            _ => return Err(SetFailure::of(o, StrvalsError::WrongType)),
        };
    }
    Ok(Value::Object(merged))
}

/// The cloud config in values with overrides on top (`merged`): an override's
/// `cloudConfigContents`, else the values' own `cloudConfigContents`, else `cloudConfig`
/// rendered from the merged values, carried by [`Overridden`].
fn in_values_over(
    object: String,
    beneath: Beneath,
    merged: Value,
    overrides: Vec<Override>,
    generation: Generation,
    cancel: &Cancel,
) -> FoundConfig {
    if contents(&merged, generation).is_some()
        && let Some(o) = overrides
            .iter()
            .rev()
            .find(|o| o.touches("cloudConfigContents"))
        && o.paths == [vec![Seg::key("cloudConfigContents")]]
    {
        let path = o.value_path.clone();
        let raw = get_owned_string(&merged);
        return TextField::found(object, path, o.name.clone(), &raw, Holder::HelmValues);
    }
    if contents(&merged, generation).is_some() {
        return match beneath {
            Beneath::Map(at, values) => in_values_map(object, at, values, generation, cancel),
            Beneath::Text(text) => in_values_text(object, text, generation, cancel),
        };
    }
    let location = match &beneath {
        Beneath::Map(at, _) => at.name("cloudConfig"),
        Beneath::Text(text) => text.at.name("cloudConfig"),
    };
    let (ini, origins) = render_cloud_config(&merged, &location, generation, cancel);
    let inner: Box<dyn super::Carrier> = match beneath {
        Beneath::Map(at, values) => Box::new(RenderedValues {
            at,
            values,
            origins: origins.clone(),
        }),
        Beneath::Text(text) => Box::new(ValuesTextRendered {
            text,
            origins: origins.clone(),
        }),
    };
    let carrier = Overridden::new(inner, origins, overrides);
    FoundConfig::new(object, location, ini, carrier)
}

/// The merged `cloudConfigContents` (an override's value).
fn get_owned_string(merged: &Value) -> Value {
    merged
        .get("cloudConfigContents")
        .cloned()
        .unwrap_or(Value::Null)
}

/// `cloudConfigContents`, when the chart's `generation` uses it (a truthy value, from 1.4.0
/// and 2.25.0 on).
fn contents(values: &Value, generation: Generation) -> Option<&Value> {
    if !generation.reads_contents() {
        return None;
    }
    values.get("cloudConfigContents").filter(|v| truthy(v))
}

/// The INI the chart renders from `cloudConfig` and the origin of each line, or why it
/// cannot render it.
fn render_cloud_config(
    values: &Value,
    location: &str,
    generation: Generation,
    cancel: &Cancel,
) -> (Result<String, SiteError>, Vec<Origin>) {
    match render::render_as(values.get("cloudConfig"), generation, cancel) {
        Ok(rendered) => (Ok(rendered.text), rendered.lines),
        Err(error) => {
            let location = location.to_owned();
            (Err(SiteError::Render { location, error }), Vec::new())
        }
    }
}

/// Whether `gvk` is the synthetic object `stackgate check` builds for a plain values file.
fn is_values_file(gvk: &GroupVersionKind) -> bool {
    gvk.group == "stackgate.dev" && gvk.kind == VALUES_FILE_KIND
}

/// Go template truthiness of a value (`if`): false, 0, "", null, empty collections are false.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(m) => !m.is_empty(),
    }
}

/// Whether the chart's `generation` renders its cloud-config Secret with these values:
/// `secret.enabled` and `secret.create` default to true and only an explicit falsy value turns
/// them off; before 2.28.0-alpha.5 `secret.enabled` is not read at all.
pub(super) fn renders_secret(values: &Value, generation: Generation) -> bool {
    let Some(secret) = values.get("secret") else {
        return true;
    };
    let switches: &[&str] = if generation.honours_secret_enabled() {
        &["enabled", "create"]
    } else {
        &["create"]
    };
    switches.iter().all(|k| secret.get(k).is_none_or(truthy))
}

/// The chart's `controllerExtraArgs` in `object`, for the `ccm-concurrency` rule: (location
/// for messages, JSON pointer of the field, the arguments). The first carrier that sets them
/// wins; see [`helm_controller_extra_args_all`] for every carrier.
pub fn helm_controller_extra_args(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
) -> Option<(String, String, Vec<String>)> {
    helm_controller_extra_args_all(gvk, object)
        .into_iter()
        .next()
}

/// Every `controllerExtraArgs` setting of the CCM chart in `object` (one per values carrier
/// that sets it), as (location, JSON pointer, arguments).
pub fn helm_controller_extra_args_all(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
) -> Vec<(String, String, Vec<String>)> {
    helm_controller_extra_args_all_within(gvk, object, &Cancel::never())
}

/// [`helm_controller_extra_args_all`] that stops reading values once `cancel` fires (what it
/// then returns is not an answer; the caller checks the flag).
pub fn helm_controller_extra_args_all_within(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    cancel: &Cancel,
) -> Vec<(String, String, Vec<String>)> {
    let charts: Vec<String> = DEFAULT_CHARTS.iter().map(|s| (*s).to_owned()).collect();
    let root = content(object);
    let values_file = is_values_file(gvk);
    // A values file's values are the file itself: name paths without the `values` prefix.
    let shown = |p: &[Seg]| {
        if values_file {
            display(p.get(1..).unwrap_or_default())
        } else {
            display(p)
        }
    };
    let mut out = Vec::new();
    let places = values_places(gvk, object, &charts, cancel);
    if places.len() > MAX_CARRIERS_PER_OBJECT {
        // Reported by the cloud-config site (`find`); reading them here would multiply the
        // per-string YAML caps.
        return out;
    }
    for place in places {
        // Stop at the flag, not at the next place: what is returned is then not an answer.
        if cancel.check().is_err() {
            return Vec::new();
        }
        let raw = get(root, &place.path);
        // `--set`-like entries apply on top; one Helm cannot read is reported by the
        // cloud-config site, and nothing is claimed here.
        let Ok(overrides) = place_overrides(root, &place, cancel) else {
            continue;
        };
        let field = shown(&place.path);
        let (values, location, field_pointer) = if place.yaml_string {
            let values = match raw {
                None | Some(Value::Null) => Value::Null,
                Some(_) => match text_values(raw, place.alias.as_deref(), cancel) {
                    Some(values) => values,
                    None => continue,
                },
            };
            let within = place
                .alias
                .as_ref()
                .map(|a| format!("{a}."))
                .unwrap_or_default();
            (
                values,
                format!("{field}, {within}controllerExtraArgs"),
                pointer(&place.path).to_string(),
            )
        } else {
            let mut p = place.path.clone();
            p.push(Seg::key("controllerExtraArgs"));
            (
                raw.cloned().unwrap_or(Value::Null),
                shown(&p),
                pointer(&p).to_string(),
            )
        };
        let Ok(merged) = merged_with(&values, &overrides, cancel) else {
            continue;
        };
        let Some(args) = merged.get("controllerExtraArgs").and_then(extra_args) else {
            continue;
        };
        // Set by an entry on top: point at that entry.
        match overrides
            .iter()
            .rev()
            .find(|o| o.touches("controllerExtraArgs"))
        {
            Some(o) => out.push((o.name.clone(), pointer(&o.value_path).to_string(), args)),
            None => out.push((location, field_pointer, args)),
        }
    }
    out
}

/// The CCM chart's values in one carrier of an object, parsed (for object families that read
/// settings other than the cloud config, e.g. `cluster.name`).
#[derive(Debug, Clone)]
pub struct ChartValues {
    /// How messages name the carrier: `spec.values`, `spec.valuesContent`, or empty for a
    /// plain values file (its values are the file).
    pub field: String,
    /// The path of the carrier from the object root (the values map or the values string).
    pub path: Vec<Seg>,
    /// The values are a YAML string (`valuesContent`, Argo `helm.values`), so a finding can
    /// only point at the string field.
    pub yaml_string: bool,
    /// The values (Null when the carrier is absent: the chart's defaults apply), with a
    /// RKE2/k3s HelmChart's `spec.set` entries applied as Helm applies `--set`.
    pub values: Value,
    /// Values merged in from outside the object, under these inline values (Flux
    /// `spec.valuesFrom`, Argo CD `helm.valueFiles`): the field that lists them, e.g.
    /// `spec.valuesFrom`. A setting these values do not make may come from there.
    pub merged_from: Option<String>,
    /// Argo CD `helm.parameters` (`[{name, value}]`), which override the values.
    pub parameters: Vec<(String, String)>,
    /// A RKE2/k3s HelmChartConfig: an overlay on the HelmChart of the same name, so what it
    /// does not set comes from that HelmChart, not from the chart's defaults.
    pub overlay: bool,
    /// A RKE2/k3s HelmChart: a HelmChartConfig of the same name may override its values.
    pub overridable: bool,
    /// In a values string of an umbrella chart, the subchart key the CCM chart's values are
    /// under (`openstack-cloud-controller-manager`); messages name keys below it.
    pub within: Option<String>,
    /// The RKE2/k3s `spec.set` entries applied to `values`, in the order Helm applies them.
    pub set_entries: Vec<SetEntry>,
}

/// One `spec.set` entry applied to a HelmChart's values: where it is, and what it sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetEntry {
    /// How messages name it: `spec.set["cluster.name"]`.
    pub name: String,
    /// JSON pointer of its value in the object.
    pub pointer: String,
    /// The values paths it sets (keys; a list index as its number).
    pub paths: Vec<Vec<String>>,
}

impl ChartValues {
    /// The last `spec.set` entry that sets exactly the values path `keys`: where a finding about
    /// that value belongs, as Helm applies `--set` over every values file.
    pub fn set_entry_for(&self, keys: &[&str]) -> Option<&SetEntry> {
        self.set_entries.iter().rev().find(|e| {
            e.paths
                .iter()
                .any(|p| p.iter().map(String::as_str).eq(keys.iter().copied()))
        })
    }

    /// How messages name `key` (a dotted values path) in this carrier:
    /// `spec.values.cluster.name`, `spec.valuesContent, cluster.name`, `cluster.name`.
    pub fn describe(&self, key: &str) -> String {
        let key = match &self.within {
            Some(within) => format!("{within}.{key}"),
            None => key.to_owned(),
        };
        match (self.field.is_empty(), self.yaml_string) {
            (true, _) => key,
            (false, true) => format!("{}, {key}", self.field),
            (false, false) => format!("{}.{key}", self.field),
        }
    }

    /// JSON pointer of `key` (values path segments) in the object: inside a values map, or
    /// the values string field itself.
    pub fn pointer(&self, key: &[&str]) -> String {
        let mut path = self.path.clone();
        if !self.yaml_string {
            path.extend(keys(key));
        }
        pointer(&path).to_string()
    }
}

/// Every carrier of the CCM chart's values in `object`, parsed. A values string that cannot
/// be read (not YAML, over [`MAX_VALUES_TEXT_BYTES`]) is left out: the cloud-config site
/// reports it. None at all past [`MAX_CARRIERS_PER_OBJECT`] (reported the same way).
pub fn chart_values_all(gvk: &GroupVersionKind, object: &DynamicObject) -> Vec<ChartValues> {
    chart_values_all_within(gvk, object, &Cancel::never())
}

/// [`chart_values_all`] that stops reading values once `cancel` fires (what it then returns
/// is not an answer; the caller checks the flag).
pub fn chart_values_all_within(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    cancel: &Cancel,
) -> Vec<ChartValues> {
    let charts: Vec<String> = DEFAULT_CHARTS.iter().map(|s| (*s).to_owned()).collect();
    let root = content(object);
    let values_file = is_values_file(gvk);
    let places = values_places(gvk, object, &charts, cancel);
    if places.len() > MAX_CARRIERS_PER_OBJECT {
        return Vec::new();
    }
    let mut out = Vec::new();
    for place in places {
        // Stop at the flag, not at the next place: what is returned is then not an answer.
        if cancel.check().is_err() {
            return Vec::new();
        }
        let raw = get(root, &place.path);
        let field = if values_file {
            display(place.path.get(1..).unwrap_or_default())
        } else {
            display(&place.path)
        };
        let values = if place.yaml_string {
            match raw {
                None | Some(Value::Null) => Value::Null,
                Some(_) => match text_values(raw, place.alias.as_deref(), cancel) {
                    Some(values) => values,
                    None => continue,
                },
            }
        } else {
            raw.cloned().unwrap_or(Value::Null)
        };
        // RKE2/k3s `spec.set` entries apply on top (Argo CD parameters are handed over as
        // `parameters`); entries Helm cannot read are reported by the cloud-config site.
        let mut set_entries = Vec::new();
        let values = match &place.overrides {
            Some(OverrideSource::HelmChartSet(_)) => {
                let Ok(overrides) = place_overrides(root, &place, cancel) else {
                    continue;
                };
                set_entries = overrides.iter().map(set_entry).collect();
                if overrides.is_empty() {
                    values
                } else {
                    match merged_with(&values, &overrides, cancel) {
                        Ok(merged) => merged,
                        Err(_) => continue,
                    }
                }
            }
            _ => values,
        };
        let (merged_from, parameters) = outside_values(root, &place.path);
        let overlay = gvk.group == "helm.cattle.io" && gvk.kind == "HelmChartConfig";
        let overridable = gvk.group == "helm.cattle.io" && gvk.kind == "HelmChart";
        out.push(ChartValues {
            field,
            path: place.path,
            yaml_string: place.yaml_string,
            values,
            merged_from,
            parameters,
            overlay,
            overridable,
            within: place.alias.filter(|_| place.yaml_string),
            set_entries,
        });
    }
    out
}

/// What [`ChartValues::set_entries`] keeps of an override: names and paths, never the value.
fn set_entry(o: &Override) -> SetEntry {
    SetEntry {
        name: o.name.clone(),
        pointer: pointer(&o.value_path).to_string(),
        paths: o
            .paths
            .iter()
            .map(|p| {
                p.iter()
                    .map(|s| match s {
                        Seg::Key(k) => k.clone(),
                        Seg::Index(i) => i.to_string(),
                    })
                    .collect()
            })
            .collect(),
    }
}

/// For the values at `path`: the field listing values merged in from outside the object
/// (Flux `spec.valuesFrom`, Argo CD `helm.valueFiles`), when not empty, and Argo CD's
/// `helm.parameters`.
fn outside_values(root: &Value, path: &[Seg]) -> (Option<String>, Vec<(String, String)>) {
    let non_empty = |v: Option<&Value>| v.and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    match path {
        [Seg::Key(spec), Seg::Key(values)] if spec == "spec" && values == "values" => {
            let from = root.pointer("/spec/valuesFrom");
            let files = root.pointer("/spec/chart/spec/valuesFiles");
            let file = root
                .pointer("/spec/chart/spec/valuesFile")
                .and_then(Value::as_str)
                .is_some_and(|f| !f.is_empty());
            let merged = if non_empty(from) {
                Some("spec.valuesFrom".to_owned())
            } else if non_empty(files) {
                Some("spec.chart.spec.valuesFiles".to_owned())
            } else {
                file.then(|| "spec.chart.spec.valuesFile".to_owned())
            };
            (merged, Vec::new())
        }
        [base @ .., Seg::Key(helm), _] if helm == "helm" => {
            let mut helm_path = base.to_vec();
            helm_path.push(Seg::key("helm"));
            let Some(helm) = get(root, &helm_path) else {
                return (None, Vec::new());
            };
            let mut files_path = helm_path.clone();
            files_path.push(Seg::key("valueFiles"));
            let merged = non_empty(helm.get("valueFiles")).then(|| display(&files_path));
            let parameters = helm
                .get("parameters")
                .and_then(Value::as_array)
                .map(|list| {
                    list.iter()
                        .filter_map(|p| {
                            let name = p.get("name").and_then(Value::as_str)?;
                            let value = p.get("value").map(render::go_value).unwrap_or_default();
                            Some((name.to_owned(), value))
                        })
                        .collect()
                })
                .unwrap_or_default();
            (merged, parameters)
        }
        _ => (None, Vec::new()),
    }
}

/// The arguments of the chart's `controllerExtraArgs` in `values`, when set.
pub fn controller_extra_args(values: &Value) -> Option<Vec<String>> {
    values.get("controllerExtraArgs").and_then(extra_args)
}

/// The arguments of a `controllerExtraArgs` value: a YAML list written as a string (what the
/// chart expects, e.g. `"- --concurrent-service-syncs=2\n"`) or an actual list.
fn extra_args(value: &Value) -> Option<Vec<String>> {
    let list = match value {
        Value::String(s) => match yaml::parse_one(s).and_then(|n| n.to_json()) {
            Ok(Value::Array(items)) => items,
            Ok(Value::Null) => return None,
            // Not a list: the chart pastes the text into the container args anyway; read
            // each `- item` line.
            _ => {
                return Some(
                    s.lines()
                        .filter_map(|l| l.trim_start().strip_prefix('-'))
                        .map(|a| a.trim().trim_matches(['"', '\'']).to_owned())
                        .filter(|a| !a.is_empty())
                        .collect(),
                );
            }
        },
        Value::Array(items) => items.clone(),
        _ => return None,
    };
    Some(
        list.iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => render::go_value(other),
            })
            .collect(),
    )
}

/// The OpenStack CCM release a GitOps object deploys, as far as the object says so exactly.
///
/// Only the CCM's minor version matters to the rules (what a release reads is decided per
/// minor), and some sources pin it only to two neighbouring minors, so this is a range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CcmVersion {
    /// Lowest CCM minor (`34` for v1.34.x) the object can deploy.
    pub min_minor: u64,
    /// Highest CCM minor it can deploy.
    pub max_minor: u64,
    /// Where the version was read, for messages: `chart version 2.33.0` or
    /// `values image.tag v1.33.1`.
    pub source: String,
}

impl CcmVersion {
    /// True when every CCM the object can deploy is older than v1.`minor`.
    pub fn all_before(&self, minor: u64) -> bool {
        self.max_minor < minor
    }
}

/// The CCM version `object` deploys, when it pins one exactly (domain-facts §1.7, §9.1):
/// the chart values' `image.tag` (the chart's DaemonSet uses it in place of its appVersion),
/// else the chart version of a Flux `HelmRelease` (`spec.chart.spec.version`), an RKE2/k3s
/// `HelmChart` (`spec.version`) or an Argo CD `Application` source (`targetRevision`).
///
/// Chart versions map to CCM releases as the chart's history shows (cloud-provider-openstack
/// `charts/openstack-cloud-controller-manager/Chart.yaml`): a release `2.Y.Z` (Y ≥ 29) ships
/// appVersion v1.Y; a pre-release `2.Y.Z-…` shipped v1.(Y-1) or v1.Y. Ranges (`>=2.30`,
/// `2.x`), chart 1.x (appVersion `latest`), tags such as `latest` or digests, and values
/// given as a YAML string are not read: None, and rules that need the version stay silent.
pub fn ccm_version(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
) -> Option<CcmVersion> {
    ccm_version_within(gvk, object, charts, &Cancel::never())
}

/// [`ccm_version`] that stops reading values once `cancel` fires.
pub fn ccm_version_within(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
    cancel: &Cancel,
) -> Option<CcmVersion> {
    let places = values_places(gvk, object, charts, cancel);
    let root = content(object);
    // image.tag in a values map wins: the chart renders `default .Chart.AppVersion .Values.image.tag`.
    for place in places.iter().filter(|p| !p.yaml_string) {
        if let Some(tag) = get(root, &place.path)
            .and_then(|v| v.get("image"))
            .and_then(|v| v.get("tag"))
            .and_then(Value::as_str)
            && let Some(minor) = image_tag_minor(tag)
        {
            return Some(CcmVersion {
                min_minor: minor,
                max_minor: minor,
                source: format!("values image.tag {}", shown_version(tag)),
            });
        }
    }
    if places.is_empty() {
        return None;
    }
    let chart_version = match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("helm.toolkit.fluxcd.io", "HelmRelease") => {
            str_at(root, &["spec", "chart", "spec", "version"])
        }
        ("helm.cattle.io", "HelmChart") => str_at(root, &["spec", "version"]),
        ("argoproj.io", "Application") => {
            let mut sources: Vec<&Value> = root.pointer("/spec/source").into_iter().collect();
            if let Some(list) = root.pointer("/spec/sources").and_then(Value::as_array) {
                sources.extend(list);
            }
            sources
                .into_iter()
                .find(|s| {
                    s.get("chart")
                        .and_then(Value::as_str)
                        .is_some_and(|c| chart_matches(c, charts))
                })
                .and_then(|s| s.get("targetRevision"))
                .and_then(Value::as_str)
        }
        _ => None,
    }?;
    let (minor, prerelease) = chart_version_minor(chart_version)?;
    let (min_minor, max_minor) = if prerelease {
        (minor.saturating_sub(1), minor)
    } else {
        (minor, minor)
    };
    Some(CcmVersion {
        min_minor,
        max_minor,
        source: format!("chart version {}", shown_version(chart_version)),
    })
}

/// The CCM release a container image runs, when its tag pins one (`…:v1.24.0`, also before a
/// `@sha256:` digest); None for no tag, `latest`, a digest alone or another scheme.
pub fn image_version(image: &str) -> Option<CcmVersion> {
    let image = image.split_once('@').map_or(image, |(name, _)| name);
    // The tag follows the last `:` after the last `/` (a registry's port comes before it).
    let last = image.rsplit_once('/').map_or(image, |(_, last)| last);
    let (_, tag) = last.rsplit_once(':')?;
    let minor = image_tag_minor(tag)?;
    Some(CcmVersion {
        min_minor: minor,
        max_minor: minor,
        source: format!("image tag {}", shown_version(tag)),
    })
}

/// `2.Y.Z` or `2.Y.Z-pre` (an optional leading `v`) → (Y, whether a pre-release); only chart
/// major 2 from 2.27 on, whose appVersion follows the chart's minor.
fn chart_version_minor(version: &str) -> Option<(u64, bool)> {
    let v = version.trim();
    let v = v.strip_prefix('v').unwrap_or(v);
    let (core, pre) = match v.split_once('-') {
        Some((core, pre)) => (core, !pre.is_empty()),
        None => (v, false),
    };
    let core = core.split_once('+').map_or(core, |(c, _)| c);
    let mut parts = core.split('.');
    let (major, minor, patch) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || ![major, minor, patch].iter().all(|p| is_number(p)) {
        return None;
    }
    let minor: u64 = minor.parse().ok()?;
    (major == "2" && minor >= 27).then_some((minor, pre))
}

/// `v1.Y.Z` (with anything after the patch number, e.g. `-rc.1`) → Y.
fn image_tag_minor(tag: &str) -> Option<u64> {
    let rest = tag.trim().strip_prefix("v1.")?;
    let (minor, after) = rest.split_once('.')?;
    let patch: String = after.chars().take_while(char::is_ascii_digit).collect();
    if !is_number(minor) || patch.is_empty() {
        return None;
    }
    minor.parse().ok()
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.len() <= 6 && s.bytes().all(|b| b.is_ascii_digit())
}

/// A version string as shown in messages: short, printable, or not at all.
fn shown_version(v: &str) -> String {
    let v = v.trim();
    // A tag `check` took from a Secret carries the marker that stands for it: shown alone.
    if crate::secret_text::ends_not_shown(v)
        && let Some(at) = v.find("<from Secret ")
    {
        return v[at..].to_owned();
    }
    if v.len() <= 40
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
    {
        v.to_owned()
    } else {
        "(not shown)".to_owned()
    }
}

/// Whether `object` carries Helm values for one of the charts the sites document asks for
/// (a GitOps object or values file whose chart reference matches). The admission decoder
/// reads `spec.values`-like subtrees only for these: every other chart's values are skipped
/// unread (an umbrella chart's values are read whole only when they hold the CCM subchart's
/// key), which keeps the memory a review costs independent of foreign charts' values.
pub fn holds_chart_values(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &super::SitesDocument,
) -> bool {
    // An umbrella chart's values are another chart's: the decoder's first reading keeps the
    // CCM subchart's key in them. Once that key is there, the rest is read too: a condition
    // or tag of the umbrella's `Chart.yaml` may read any value in them (`unseen_switch`).
    let charts = chart_names(sites);
    !values_places(gvk, object, &charts, &Cancel::never()).is_empty()
        || unnamed_chart_ref_with_values(gvk, object, &charts)
}

/// Whether `object` is a Flux HelmRelease whose `spec.chartRef` does not name the chart and
/// which has `spec.values`: the decoder's first reading keeps none of another chart's values,
/// so whether these are the CCM chart's (and named as unseen, [`chart_not_named`]) is only told
/// from the full reading.
fn unnamed_chart_ref_with_values(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
) -> bool {
    let root = content(object);
    gvk.group == "helm.toolkit.fluxcd.io"
        && gvk.kind == "HelmRelease"
        && str_at(root, &["spec", "chart", "spec", "chart"]).is_none()
        && str_at(root, &["spec", "chartRef", "name"]).is_some_and(|n| !chart_matches(n, charts))
        && root.pointer("/spec/values").is_some_and(Value::is_object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudconf::{Document, IniEdit};
    use crate::sites::Anchor;
    use serde_json::json;

    fn charts() -> Vec<String> {
        DEFAULT_CHARTS.iter().map(|s| (*s).to_owned()).collect()
    }

    /// The edit most of these tests make: serial Octavia API calls on.
    const SERIAL_CALLS: IniEdit = IniEdit {
        section: "LoadBalancer",
        key: "provider-requires-serial-api-calls",
        value: "true",
    };

    /// The patch `found` writes for [`SERIAL_CALLS`], given its text as parsed (not edited).
    fn serial_calls_patch(found: &FoundConfig) -> Value {
        let doc = Document::parse(found.text.as_ref().unwrap()).unwrap();
        serde_json::to_value(found.patch(&doc, &[SERIAL_CALLS])).unwrap()
    }

    fn obj(v: Value) -> (GroupVersionKind, DynamicObject) {
        let api = v["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = v["kind"].as_str().unwrap_or_default().to_owned();
        let (g, ver) = api.split_once('/').unwrap_or(("", api.as_str()));
        (
            GroupVersionKind::gvk(g, ver, &kind),
            serde_json::from_value(v).unwrap(),
        )
    }

    #[test]
    fn ccm_versions_from_chart_versions_and_image_tags() {
        let c = charts();
        let flux = |version: &str, values: Value| {
            obj(
                json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "occm", "namespace": "kube-system"},
                "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager",
                    "version": version}}, "values": values}}),
            )
        };
        let range = |v: Option<CcmVersion>| v.map(|v| (v.min_minor, v.max_minor));
        for (version, want) in [
            ("2.33.0", Some((33, 33))),
            ("v2.36.1", Some((36, 36))),
            ("2.34.0-alpha.1", Some((33, 34))),
            ("2.31.1+build.5", Some((31, 31))),
            (">=2.30.0", None),
            ("2.x", None),
            ("1.5.1", None),
            ("2.26.0", None),
            ("2.33", None),
            ("", None),
        ] {
            let (gvk, o) = flux(version, json!({}));
            assert_eq!(range(ccm_version(&gvk, &o, &c)), want, "{version}");
        }
        // image.tag wins; an unreadable tag falls back to the chart version.
        let (gvk, o) = flux("2.31.1", json!({"image": {"tag": "v1.35.0"}}));
        let v = ccm_version(&gvk, &o, &c).unwrap();
        assert_eq!(
            (v.min_minor, v.source.as_str()),
            (35, "values image.tag v1.35.0")
        );
        let (gvk, o) = flux("2.31.1", json!({"image": {"tag": "latest"}}));
        assert_eq!(range(ccm_version(&gvk, &o, &c)), Some((31, 31)));
        // Another chart: nothing.
        let (gvk, o) = obj(
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "x"},
            "spec": {"chart": {"spec": {"chart": "ingress-nginx", "version": "2.33.0"}}}}),
        );
        assert_eq!(range(ccm_version(&gvk, &o, &c)), None);
        // HelmChart and Argo CD.
        let (gvk, o) = obj(
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "occm"},
            "spec": {"chart": "openstack-cloud-controller-manager", "version": "2.32.0"}}),
        );
        assert_eq!(range(ccm_version(&gvk, &o, &c)), Some((32, 32)));
        let (gvk, o) = obj(
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "occm"},
            "spec": {"sources": [{"repoURL": "https://example/values", "targetRevision": "main"},
                {"chart": "openstack-cloud-controller-manager", "targetRevision": "2.35.0"}]}}),
        );
        assert_eq!(range(ccm_version(&gvk, &o, &c)), Some((35, 35)));
        // A version string that is not a plain version is never shown.
        assert_eq!(shown_version("2.33.0"), "2.33.0");
        assert_eq!(shown_version("2.33.0 secret"), "(not shown)");
    }

    #[test]
    fn chart_references() {
        let c = charts();
        for r in [
            "openstack-cloud-controller-manager",
            "cpo/openstack-cloud-controller-manager",
            "./charts/openstack-cloud-controller-manager/",
            "oci://registry.example/charts/openstack-cloud-controller-manager:2.31.1",
            "https://example/openstack-cloud-controller-manager-2.31.1.tgz",
            // Issue 23: other spellings of the same chart.
            "https://github.com/o/r/blob/main/openstack-cloud-controller-manager-2.31.1.tgz?raw=true",
            "https://example/openstack-cloud-controller-manager-2.31.1.tgz#sha256=abc",
            "https://example/openstack-cloud-controller-manager-2.31.1.TGZ",
            "https://example/openstack-cloud-controller-manager-v2.31.1.tgz",
            "https://example/openstack-cloud-controller-manager-2.31.1.tar.gz",
            "https://example/openstack%2Dcloud-controller-manager-2.31.1.tgz",
            "charts/openstack-cloud-controller-manager/.",
            "charts/openstack-cloud-controller-manager/templates/..",
            "charts/openstack-cloud-controller-manager//",
            "oci://registry.example/charts/openstack-cloud-controller-manager@sha256:0123",
        ] {
            assert!(chart_matches(r, &c), "{r}");
        }
        for r in [
            "openstack-cinder-csi",
            "openstack-cloud-controller-manager-extra",
            "https://example/openstack-cloud-controller-manager-extra-2.31.1.tgz",
            "charts/openstack-cloud-controller-manager/templates",
            "charts/openstack-cloud-controller-manager/..",
            "https://example/x.tgz?openstack-cloud-controller-manager",
            "",
            ".",
        ] {
            assert!(!chart_matches(r, &c), "{r}");
        }
    }

    #[test]
    fn helmrelease_structured_values_and_patch_creating_parents() {
        let (gvk, o) = obj(
            json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":{"spec":{"chart":"openstack-cloud-controller-manager"}},
                    "values":{"cloudConfig":{"global":{"region":"r"},"loadBalancer":null}}}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.location, "spec.values.cloudConfig");
        let text = f.text.clone().unwrap();
        assert!(text.starts_with("[Global]\nregion = \"r\"\n\n[Networking]\n\n[LoadBalancer]\n\n"));
        assert_eq!(
            f.describe(Some(2)),
            "HelmRelease kube-system/occm spec.values.cloudConfig.global.region"
        );
        let mut doc = Document::parse(&text).unwrap();
        let edit = SERIAL_CALLS;
        let summary = doc.set(edit.section, edit.key, edit.value);
        assert_eq!(
            f.describe(Some(summary.line)),
            "HelmRelease kube-system/occm spec.values.cloudConfig.loadBalancer"
        );
        let ops = serde_json::to_value(f.patch(&doc, &[edit])).unwrap();
        assert_eq!(
            ops,
            json!([{"op":"add","path":"/spec/values/cloudConfig/loadBalancer",
            "value":{"provider-requires-serial-api-calls":true}}])
        );
    }

    #[test]
    fn missing_values_and_disabled_secret() {
        let (gvk, o) = obj(
            json!({"apiVersion":"helm.toolkit.fluxcd.io/v2beta2","kind":"HelmRelease",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":{"spec":{"chart":"openstack-cloud-controller-manager"}}}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        let ops = serial_calls_patch(&found[0]);
        assert_eq!(
            ops,
            json!([{"op":"add","path":"/spec/values","value":{"cloudConfig":{"loadBalancer":{"provider-requires-serial-api-calls":true}}}}])
        );
        let (gvk, o) = obj(
            json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
            "metadata":{"name":"occm"},
            "spec":{"chart":{"spec":{"chart":"openstack-cloud-controller-manager"}},"values":{"secret":{"create":false}}}}),
        );
        assert!(find(&gvk, &o, &charts(), &Cancel::never()).is_empty());
    }

    #[test]
    fn helmchart_values_content_edit_is_one_line() {
        let values = "# customer A\ncloudConfig:\n  loadBalancer:\n    subnet-id: s  # net\n  # trailing comment\ncontrollerExtraArgs: |-\n  - --concurrent-service-syncs=4\n";
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager","valuesContent": values}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        let f = &found[0];
        assert_eq!(
            f.describe(Some(6)),
            "HelmChart kube-system/occm spec.valuesContent, cloudConfig.loadBalancer.subnet-id (line 4 of the values)"
        );
        let mut doc = Document::parse(f.text.as_ref().unwrap()).unwrap();
        let edit = SERIAL_CALLS;
        doc.set(edit.section, edit.key, edit.value);
        let ops = serde_json::to_value(f.patch(&doc, &[edit])).unwrap();
        let expected = values.replace(
            "s  # net\n",
            "s  # net\n    provider-requires-serial-api-calls: true\n",
        );
        assert_eq!(
            ops,
            json!([{"op":"replace","path":"/spec/valuesContent","value": expected}])
        );
        let (loc, ptr, args) = helm_controller_extra_args(&gvk, &o).unwrap();
        assert_eq!(
            (loc.as_str(), ptr.as_str()),
            (
                "spec.valuesContent, controllerExtraArgs",
                "/spec/valuesContent"
            )
        );
        assert_eq!(args, vec!["--concurrent-service-syncs=4"]);
    }

    #[test]
    fn set_entries_growing_lists_past_the_limit_are_one_site_error() {
        // 20 entries padding lists to Helm's largest index: 1.3 million nulls before the limit.
        let set: serde_json::Map<String, Value> = (0..20)
            .map(|i| (format!("k{i:02}[65536]"), json!("1")))
            .collect();
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager","set": set}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let error = found[0].text.as_ref().expect_err("over the limit");
        assert!(
            matches!(error, SiteError::SetTooLarge { location, limit: strvals::SetLimit::Nodes }
                if location == "spec.set[\"k01[65536]\"]"),
            "{error:?}"
        );
        assert!(chart_values_all(&gvk, &o).is_empty());
    }

    #[test]
    fn argo_sources_values_object_and_string() {
        let contents = "cloudConfigContents: |\n  [Global]\n  region = r\n";
        let (gvk, o) = obj(
            json!({"apiVersion":"argoproj.io/v1alpha1","kind":"Application",
            "metadata":{"name":"occm","namespace":"argocd"},
            "spec":{"sources":[{"repoURL":"https://x","path":"other"},
                {"chart":"openstack-cloud-controller-manager","targetRevision":"2.31.1",
                 "helm":{"values": contents,
                 "valuesObject":{"cloudConfig":{"loadBalancer":{"provider-requires-serial-api-calls":false}}}}},
                {"chart":"openstack-cloud-controller-manager","targetRevision":"2.31.1",
                 "helm":{"values": contents}}]}}),
        );
        // Beside a valuesObject, Argo CD ignores the values string: it is not read.
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 2);
        assert_eq!(
            found[0].location,
            "spec.sources[1].helm.valuesObject.cloudConfig"
        );
        assert_eq!(
            found[1].location,
            "spec.sources[2].helm.values, cloudConfigContents"
        );
        assert_eq!(
            found[1].describe(Some(2)),
            "Application argocd/occm spec.sources[2].helm.values, cloudConfigContents line 2 (line 3 of the values)"
        );
        assert_eq!(
            found[1].trace(Some(2)),
            Anchor::TextLine {
                path: vec![
                    Seg::key("spec"),
                    Seg::key("sources"),
                    Seg::Index(2),
                    Seg::key("helm"),
                    Seg::key("values")
                ],
                line: 3
            }
        );
    }

    #[test]
    fn values_from_is_unseen_unless_spec_values_decide() {
        let release = |values: Value| {
            obj(
                json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":{"spec":{"chart":"openstack-cloud-controller-manager",
                    "version":"2.31.1"}},
                "valuesFrom":[{"kind":"Secret","name":"v","valuesKey":"x.yaml"},
                    {"kind":"ConfigMap","name":"o","targetPath":"a.b","optional":true}],
                "values": values}}),
            )
        };
        let (gvk, o) = release(json!({"cloudConfig":{"global":{"region":"r"}}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].text.clone().unwrap_err().to_string(),
            "spec.valuesFrom: values come from Secret v key x.yaml, ConfigMap o key values.yaml \
             at a.b (optional), which this run cannot see"
        );
        assert_eq!(found[0].pointer(), "/spec/valuesFrom");
        let doc = Document::parse("[LoadBalancer]\n").unwrap();
        assert!(found[0].patch(&doc, &[]).is_empty());
        // `spec.values` is merged last: its cloudConfigContents and secret switch are final.
        let (gvk, o) = release(json!({"cloudConfigContents":"[Global]\n"}));
        assert_eq!(
            find(&gvk, &o, &charts(), &Cancel::never())[0]
                .text
                .as_deref(),
            Ok("[Global]\n")
        );
        let (gvk, o) = release(json!({"secret":{"enabled":false}}));
        assert!(find(&gvk, &o, &charts(), &Cancel::never()).is_empty());
    }

    #[test]
    fn helmchart_set_overrides_values_content_and_takes_edits_of_its_keys() {
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager",
                "valuesContent":"cloudConfig:\n  global:\n    region: r\n",
                "set":{"cloudConfig.loadBalancer.lb-method":"ROUND_ROBIN",
                    "cloudConfig.global.region":"s", "replicas": 2}}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        let text = f.text.clone().unwrap();
        assert!(text.contains("region = \"s\""), "{text}");
        assert!(text.contains("lb-method = \"ROUND_ROBIN\""), "{text}");
        let line = text
            .lines()
            .position(|l| l.starts_with("lb-method"))
            .unwrap()
            + 1;
        assert_eq!(
            f.describe(Some(line)),
            "HelmChart kube-system/occm spec.set[\"cloudConfig.loadBalancer.lb-method\"]"
        );
        assert_eq!(
            f.trace(Some(line)),
            Anchor::Node(vec![
                Seg::key("spec"),
                Seg::key("set"),
                Seg::key("cloudConfig.loadBalancer.lb-method")
            ])
        );
        // An edit of a key `spec.set` sets is written there; any other into valuesContent.
        let doc = Document::parse(&text).unwrap();
        let edits = [
            IniEdit {
                section: "LoadBalancer",
                key: "LB-Method",
                value: "SOURCE_IP_PORT",
            },
            SERIAL_CALLS,
        ];
        let ops = serde_json::to_value(f.patch(&doc, &edits)).unwrap();
        assert_eq!(
            ops,
            json!([
                {"op":"replace","path":"/spec/set/cloudConfig.loadBalancer.lb-method","value":"SOURCE_IP_PORT"},
                {"op":"replace","path":"/spec/valuesContent","value":
                    "cloudConfig:\n  global:\n    region: r\n  loadBalancer:\n    provider-requires-serial-api-calls: true\n"}
            ])
        );
        // `secret.enabled` switched off by `--set`: no Secret, no site.
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm"},
            "spec":{"chart":"openstack-cloud-controller-manager","version":"2.31.1",
                "set":{"secret.enabled":"false"}}}));
        assert!(find(&gvk, &o, &charts(), &Cancel::never()).is_empty());
    }

    #[test]
    fn umbrella_chart_values_are_read_under_the_subchart_key() {
        let release = |chart: &str, values: Value| {
            obj(
                json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
                "metadata":{"name":"addons","namespace":"kube-system"},
                "spec":{"chart":{"spec":{"chart": chart}}, "values": values}}),
            )
        };
        let (gvk, o) = release(
            "cluster-addons",
            json!({"openstack-cloud-controller-manager":{"cloudConfig":{"global":{"region":"r"}}},
                "cloudConfig": {"ignored": true}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].location,
            "spec.values.openstack-cloud-controller-manager.cloudConfig"
        );
        let ops = serial_calls_patch(&found[0]);
        assert_eq!(
            ops,
            json!([{"op":"add","path":"/spec/values/openstack-cloud-controller-manager/cloudConfig/loadBalancer",
                "value":{"provider-requires-serial-api-calls":true}}])
        );
        // `enabled: false` switches the subchart off only if the umbrella's Chart.yaml (not
        // seen here) names it as a condition: read both ways, the site says what could.
        let (gvk, o) = release(
            "cluster-addons",
            json!({"openstack-cloud-controller-manager":{"enabled":false,"cloudConfig":{}},
                "tags": {"cloud": true}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let alternative = found[0].alternative.as_ref().expect("read both ways");
        assert_eq!(
            alternative.switch.as_deref(),
            Some("`openstack-cloud-controller-manager.enabled: false`")
        );
        assert_eq!((alternative.of, alternative.by_version), (2, false));
        // Another chart without the key: nothing.
        let (gvk, o) = release("podinfo", json!({"cloudConfig":{"global":{"region":"r"}}}));
        assert!(find(&gvk, &o, &charts(), &Cancel::never()).is_empty());
    }

    #[test]
    fn umbrella_values_strings_are_read_and_edited_under_the_subchart_key() {
        let values = "global: {}\nopenstack-cloud-controller-manager:\n  cloudConfig:\n    global:\n      region: r\n  controllerExtraArgs: |-\n    - --concurrent-service-syncs=4\ncloudConfig: {}\n";
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"addons","namespace":"kube-system"},
            "spec":{"chart":"cluster-addons","valuesContent": values,
                "set":{"openstack-cloud-controller-manager.cloudConfig.loadBalancer.lb-method":"ROUND_ROBIN",
                    "cloudConfig.loadBalancer.lb-method":"SOURCE_IP"}}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(
            f.location,
            "spec.valuesContent, openstack-cloud-controller-manager.cloudConfig"
        );
        let text = f.text.clone().unwrap();
        // Only the entry under the subchart key applies to the CCM.
        assert!(text.contains("lb-method = \"ROUND_ROBIN\""), "{text}");
        assert_eq!(
            f.describe(Some(2)),
            "HelmChart kube-system/addons spec.valuesContent, \
             openstack-cloud-controller-manager.cloudConfig.global.region (line 5 of the values)"
        );
        let ops = serial_calls_patch(f);
        let expected = values.replace(
            "      region: r\n",
            "      region: r\n    loadBalancer:\n      provider-requires-serial-api-calls: true\n",
        );
        assert_eq!(
            ops,
            json!([{"op":"replace","path":"/spec/valuesContent","value": expected}])
        );
        let (loc, ptr, args) = helm_controller_extra_args(&gvk, &o).unwrap();
        assert_eq!(
            (loc.as_str(), ptr.as_str()),
            (
                "spec.valuesContent, openstack-cloud-controller-manager.controllerExtraArgs",
                "/spec/valuesContent"
            )
        );
        assert_eq!(args, vec!["--concurrent-service-syncs=4"]);
        // Argo CD `helm.values` of an umbrella chart, with its cloudConfigContents.
        let (gvk, o) = obj(
            json!({"apiVersion":"argoproj.io/v1alpha1","kind":"Application",
            "metadata":{"name":"addons","namespace":"argocd"},
            "spec":{"source":{"chart":"cluster-addons","helm":{"values":
                "openstack-cloud-controller-manager:\n  cloudConfigContents: |\n    [Global]\n    region = r\n"}}}}),
        );
        // The subchart's version is not named here: chart versions 1.0.0–1.3.0 and 2.24.0
        // render the (empty) cloudConfig, later ones cloudConfigContents.
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 2);
        let alternative = found[1].alternative.as_ref().expect("an alternative");
        assert_eq!(alternative.versions, "1.4.0, 2.25.0 and later");
        assert_eq!((alternative.class, alternative.of), (1, 2));
        assert_eq!(
            found[1].describe(Some(2)),
            "Application argocd/addons spec.source.helm.values, \
             openstack-cloud-controller-manager.cloudConfigContents line 2 (line 4 of the values)"
        );
        // A subchart perhaps switched off in the string (by a tag, or a condition on a
        // `false` set on top): read both ways.
        for (values, set, why) in [
            (
                "tags: {cloud: false}\nopenstack-cloud-controller-manager: {}\n",
                json!({}),
                "`tags.cloud: false`",
            ),
            (
                "openstack-cloud-controller-manager: {}\n",
                json!({"ccm.on": "False"}),
                "`ccm.on: false` in spec.set",
            ),
        ] {
            let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
                "metadata":{"name":"addons","namespace":"kube-system"},
                "spec":{"chart": "addons", "valuesContent": values, "set": set}}));
            let found = find(&gvk, &o, &charts(), &Cancel::never());
            assert_eq!(found.len(), 1, "{values}");
            let alternative = found[0].alternative.as_ref().expect("read both ways");
            assert_eq!(alternative.switch.as_deref(), Some(why));
        }
        // The CCM chart's own settings below the subchart key are not switches.
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"addons","namespace":"kube-system"},
            "spec":{"chart": "addons",
                "valuesContent": "openstack-cloud-controller-manager: {serviceMonitor: {enabled: false}}\n",
                "set": {"openstack-cloud-controller-manager.serviceMonitor.x": "false"}}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].alternative, None);
    }

    #[test]
    fn image_tags_pin_a_ccm_release() {
        let minor = |image: &str| image_version(image).map(|v| (v.min_minor, v.max_minor));
        assert_eq!(
            minor("registry.k8s.io/provider-os/occm:v1.24.0"),
            Some((24, 24))
        );
        assert_eq!(
            minor("registry:5000/occm:v1.31.2-rc.1@sha256:0123"),
            Some((31, 31))
        );
        assert_eq!(
            image_version("occm:v1.24.0").map(|v| v.source).as_deref(),
            Some("image tag v1.24.0")
        );
        for none in [
            "registry:5000/occm",
            "occm:latest",
            "occm@sha256:0123",
            "occm:1.24.0",
            "",
        ] {
            assert_eq!(minor(none), None, "{none}");
        }
    }

    #[test]
    fn k0s_cluster_config_chart_values() {
        let (gvk, o) = obj(
            json!({"apiVersion":"k0s.k0sproject.io/v1beta1","kind":"ClusterConfig",
            "metadata":{"name":"k0s","namespace":"kube-system"},
            "spec":{"extensions":{"helm":{"charts":[
                {"name":"tempo","chartname":"grafana/tempo","values":"cloudConfig: {}\n"},
                {"name":"occm","chartname":"openstack/openstack-cloud-controller-manager",
                 "values":"cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false\n"}]}}}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].describe(Some(
                found[0]
                    .text
                    .as_ref()
                    .unwrap()
                    .lines()
                    .position(|l| l.starts_with("provider"))
                    .unwrap()
                    + 1
            )),
            "ClusterConfig kube-system/k0s spec.extensions.helm.charts[1].values, \
             cloudConfig.loadBalancer.provider-requires-serial-api-calls (line 3 of the values)"
        );
    }

    /// A k0s config with `others` other charts whose values mention the CCM chart (in a
    /// comment: no umbrella key), then the CCM chart with serial `false`.
    fn k0s_with_mentions(others: usize) -> (GroupVersionKind, DynamicObject) {
        let mut list: Vec<Value> = (0..others)
            .map(|i| {
                json!({"name": format!("app{i}"), "chartname": format!("apps/app{i}"),
                    "values": "# not openstack-cloud-controller-manager\na: 1\n"})
            })
            .collect();
        list.push(json!({"name": "occm", "chartname": "openstack/openstack-cloud-controller-manager",
            "values": "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false\n"}));
        obj(
            json!({"apiVersion": "k0s.k0sproject.io/v1beta1", "kind": "ClusterConfig",
            "metadata": {"name": "k0s", "namespace": "kube-system"},
            "spec": {"extensions": {"helm": {"charts": list}}}}),
        )
    }

    #[test]
    fn k0s_umbrella_keys_spelled_with_escapes_pass_the_prefilter() {
        // a: invalid YAML that never names the chart (not parsed, so no error). b: its key
        // spells the chart only with an escape, which the prefilter reads.
        let (gvk, o) = obj(json!({"apiVersion": "k0s.k0sproject.io/v1beta1",
            "kind": "ClusterConfig", "metadata": {"name": "k0s", "namespace": "kube-system"},
            "spec": {"extensions": {"helm": {"charts": [
                {"name": "a", "chartname": "apps/a", "values": "a: [\n"},
                {"name": "b", "chartname": "apps/b",
                 "values": "\"openstack\\x2dcloud-controller-manager\": {cloudConfig: {}}\n"}]}}}}));
        let places = values_places(&gvk, &o, &charts(), &Cancel::never());
        // Only b, whose escaped key spells the chart (found by the prefilter's escape reading).
        assert_eq!(places.len(), 1);
        assert_eq!(
            places[0].alias.as_deref(),
            Some("openstack-cloud-controller-manager")
        );
        assert_eq!(
            display(&places[0].path),
            "spec.extensions.helm.charts[1].values"
        );
    }

    #[test]
    fn k0s_values_mentioning_the_chart_past_the_carrier_cap_are_not_parsed() {
        let (gvk, o) = k0s_with_mentions(MAX_CARRIERS_PER_OBJECT);
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert!(
            found[0].text.as_ref().is_ok_and(|t| t.contains("false")),
            "{:?}",
            found[0].text
        );
        let (gvk, o) = k0s_with_mentions(MAX_CARRIERS_PER_OBJECT + 1);
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert!(
            matches!(&found[0].text, Err(SiteError::TooManyCarriers { count, .. })
                if *count == MAX_CARRIERS_PER_OBJECT + 2),
            "{:?}",
            found[0].text
        );
    }

    #[test]
    fn set_values_typed_as_helm_types_them() {
        assert_eq!(strvals::set_typed("False"), json!(false));
        assert_eq!(strvals::set_typed("12"), json!(12));
        assert_eq!(strvals::set_typed("012"), json!("012"));
        assert_eq!(strvals::set_typed("x"), json!("x"));
        // Go's EqualFold: any case, and the long s folds to s.
        assert_eq!(strvals::set_typed("TRUE"), json!(true));
        assert_eq!(strvals::set_typed("nUlL"), json!(null));
        assert_eq!(strvals::set_typed("fal\u{17F}e"), json!(false));
        assert_eq!(strvals::set_typed("fals"), json!("fals"));
        assert_eq!(strvals::set_typed("falsee"), json!("falsee"));
        // helm-controller's typedVal lowercases: only these three words are typed strings.
        assert!(helm_controller_typed("FaLsE") && helm_controller_typed("NULL"));
        assert!(!helm_controller_typed("1") && !helm_controller_typed("off"));
    }

    #[test]
    fn set_entries_follow_helm_strvals_list_indexes_and_unreadable_paths() {
        let chart = |set: Value| {
            obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
                "metadata":{"name":"occm","namespace":"kube-system"},
                "spec":{"chart":"openstack-cloud-controller-manager",
                    "valuesContent":"cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: true\n",
                    "set": set}}))
        };
        // List paths outside cloudConfig are followed and change nothing it renders.
        let (gvk, o) = chart(json!({"tolerations[0].key": "x",
            "extraEnv[1].provider-requires-serial-api-calls": "false"}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        let text = found[0].text.clone().unwrap();
        assert!(
            text.contains("provider-requires-serial-api-calls = \"true\""),
            "{text}"
        );
        // A list value and a comma escaped by helm-controller stay one value.
        let (gvk, o) = chart(json!({"cloudConfig.global.region": "a,b"}));
        let text = find(&gvk, &o, &charts(), &Cancel::never())[0]
            .text
            .clone()
            .unwrap();
        assert!(text.contains("region = \"a,b\""), "{text}");
        // A path Helm cannot read: the site says so and nothing is edited.
        for key in ["cloudConfig.loadBalancer[x]", "cloudConfig..a", "a[0]b"] {
            let (gvk, o) = chart(json!({ key: "false" }));
            let found = find(&gvk, &o, &charts(), &Cancel::never());
            assert_eq!(found.len(), 1, "{key}");
            let err = found[0].text.clone().unwrap_err();
            assert!(matches!(err, SiteError::SetEntry { .. }), "{key}: {err}");
            assert!(
                err.to_string().starts_with(&format!(
                    "spec.set[\"{key}\"] is not a --set entry Helm can read"
                )),
                "{err}"
            );
            assert_eq!(
                found[0].pointer(),
                pointer(&[Seg::key("spec"), Seg::key("set"), Seg::key(key)]).to_string()
            );
            let doc = Document::parse("[LoadBalancer]\n").unwrap();
            assert!(found[0].patch(&doc, &[SERIAL_CALLS]).is_empty());
        }
        // A key through a value of another type: Helm fails too.
        let (gvk, o) =
            chart(json!({"cloudConfig.loadBalancer.provider-requires-serial-api-calls.x": "1"}));
        assert!(matches!(
            find(&gvk, &o, &charts(), &Cancel::never())[0].text,
            Err(SiteError::SetEntry { .. })
        ));
    }

    #[test]
    fn controller_extra_args_set_on_top_point_at_the_entry() {
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager",
                "valuesContent":"controllerExtraArgs: |-\n  - --concurrent-service-syncs=1\n",
                "set":{"controllerExtraArgs":"- --concurrent-service-syncs=4"}}}));
        let (loc, ptr, args) = helm_controller_extra_args(&gvk, &o).unwrap();
        assert_eq!(
            (loc.as_str(), ptr.as_str()),
            (
                "spec.set[\"controllerExtraArgs\"]",
                "/spec/set/controllerExtraArgs"
            )
        );
        assert_eq!(args, vec!["--concurrent-service-syncs=4"]);
        // Argo CD parameters, also with a list index.
        let (gvk, o) = obj(
            json!({"apiVersion":"argoproj.io/v1alpha1","kind":"Application",
            "metadata":{"name":"occm","namespace":"argocd"},
            "spec":{"source":{"chart":"openstack-cloud-controller-manager",
                "helm":{"parameters":[{"name":"controllerExtraArgs[0]",
                    "value":"--concurrent-service-syncs=4"}]}}}}),
        );
        let (loc, ptr, args) = helm_controller_extra_args(&gvk, &o).unwrap();
        assert_eq!(
            (loc.as_str(), ptr.as_str()),
            (
                "spec.source.helm.parameters[0] (controllerExtraArgs[0])",
                "/spec/source/helm/parameters/0/value"
            )
        );
        assert_eq!(args, vec!["--concurrent-service-syncs=4"]);
    }

    #[test]
    fn unreadable_values_are_site_errors_without_content() {
        let (gvk, o) = obj(
            json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart","metadata":{"name":"x"},
            "spec":{"chart":"openstack-cloud-controller-manager","valuesContent":"a: [secret-value\n"}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        let err = found[0].text.clone().unwrap_err().to_string();
        assert!(
            err.starts_with("spec.valuesContent is not valid YAML"),
            "{err}"
        );
        assert!(!err.contains("secret-value"));
    }
}
