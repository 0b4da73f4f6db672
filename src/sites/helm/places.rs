//! Where an object holds the CCM chart's values: `values_places` and the per-controller place
//! readers (Argo CD, ApplicationSet, Sveltos, Fleet, k0s, kustomize), umbrella subchart keys
//! and the chart generation a delivery pins.

use super::{
    MAX_CARRIERS_PER_OBJECT, MAX_VALUES_TEXT_BYTES, VALUES_FILE_CHART_VERSION_KEY,
    VALUES_FILE_KIND, VALUES_FILE_SUBCHART_CONDITION_KEY, VALUES_FILE_SUBCHART_KEY,
    VALUES_FILE_SUBCHART_TAGS_KEY, chart_names, content, get, keys, str_at,
};
use crate::budget::Cancel;
use crate::sites::chart::chart_matches;
use crate::sites::generation::{Generation, Generations};
use crate::sites::path::{display, shown_entry};
use crate::yaml::{self, Seg};
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

/// A place in an object that holds the chart's values.
#[derive(Debug, Clone)]
pub(super) struct ValuesPlace {
    /// Path of the values map or of the values string, from the object root.
    pub(super) path: Vec<Seg>,
    /// The values are a YAML string (HelmChart `valuesContent`, Argo `helm.values`), not a map.
    pub(super) yaml_string: bool,
    /// Where values beneath these are named but not held (Flux `spec.valuesFrom` and
    /// `spec.chart.spec.valuesFiles` / `valuesFile`, Argo CD `helm.valueFiles`).
    pub(super) unseen: Vec<Vec<Seg>>,
    /// Where values set on top of these are named but not held: Argo CD
    /// `helm.fileParameters` (Helm's `--set-file`, applied after every `--set-string`), RKE2/k3s
    /// `spec.valuesSecrets` (values files mounted after `valuesContent` and `values`).
    pub(super) unseen_on_top: Option<OnTop>,
    /// The chart that renders these values cannot be known from the object: where that is
    /// said (HelmChart `spec.chartContent`, Flux `spec.chartRef`) and what messages say of it.
    pub(super) chart_unseen: Option<(Vec<Seg>, String)>,
    /// Where values set on top of these are (HelmChart `spec.set`, Argo CD `helm.parameters`).
    pub(super) overrides: Option<OverrideSource>,
    /// Structured values Helm reads as a values file after these (RKE2/k3s HelmChart and
    /// HelmChartConfig `spec.values`, mounted as `values-*-001-*-Values.yaml` after the
    /// `valuesContent` file by helm-controller's `setValuesSecret`).
    pub(super) values_over: Option<Vec<Seg>>,
    /// The CCM chart is a subchart of the chart these values are for, under this key: `path`
    /// ends with it, and overrides are read below it.
    pub(super) alias: Option<String>,
    /// The chart generations the delivery's pinned version allows (all when it pins none).
    pub(super) generations: Generations,
    /// Whether the umbrella chart renders the subchart under `alias` ([`crate::sites::umbrella`]).
    pub(super) switch: Switch,
}

/// Whether an umbrella chart renders its CCM subchart, as far as the object shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Switch {
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
pub(super) enum OnTop {
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
pub(super) enum OverrideSource {
    /// RKE2/k3s HelmChart `spec.set`: a map of `--set` path → string or integer.
    HelmChartSet(Vec<Seg>),
    /// Argo CD `helm.parameters`: a list of `{name, value, forceString}`.
    ArgoParameters(Vec<Seg>),
}

/// The places in `object` that hold values of the charts in `charts`.
///
/// Values strings are parsed here (to find an umbrella chart's subchart key): once `cancel`
/// fires no more are, and what is returned is not an answer (the caller checks the flag).
pub(super) fn values_places(
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
                if crate::sites::delivery::plain_values_template(root).is_some() =>
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
            ("stackgate.dev", "v1alpha1", crate::sites::delivery::FLEET_YAML_KIND) => {
                return fleet_places(root, charts, &["helm"]);
            }
            ("k0s.k0sproject.io", _, "ClusterConfig") => {
                return k0s_places(root, charts, &[], cancel);
            }
            ("kustomize.config.k8s.io", _, "Kustomization") => {
                return kustomize_places(root, charts);
            }
            // Objects that embed a k0s ClusterConfig (k0smotron, k0sctl): `delivery.rs`.
            (group, _, kind) => match crate::sites::delivery::k0s_config_path(group, kind) {
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
        let dependency = crate::sites::umbrella::Dependency {
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
/// chart's versions are placed in [`crate::sites::generation::CHART_TAGS`]; Giant Swarm's app has
/// versions of its own and renders with the helper of the CCM subchart it ships, read as the
/// newest generation (as before generations were told apart).
fn generations_of(chart: Option<&str>, version: Option<&str>) -> Generations {
    let giant_swarm = [crate::sites::delivery::GIANT_SWARM_APP_CHART.to_owned()];
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
fn subchart_alias(
    values: Option<&Value>,
    charts: &[String],
    ours: bool,
) -> Option<String> {
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
fn unseen_switch(
    alias: &str,
    values: Option<&Value>,
    root: &Value,
    place: &ValuesPlace,
) -> Switch {
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
    match crate::sites::umbrella::could_switch_off(alias, &named) {
        Some(why) => Switch::Unseen(why),
        None => Switch::On,
    }
}

/// The `--set`-like entries of `source` that set `false` (a bool, or the text Helm types as
/// one), as a map from each entry's key as written to `false`; entries below the subchart key
/// `alias` but its `enabled` are the CCM chart's settings, not switches, and are left out.
fn false_entries(
    root: &Value,
    source: &OverrideSource,
    alias: &str,
) -> (Vec<Seg>, Value) {
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
pub(super) fn text_values(
    raw: Option<&Value>,
    alias: Option<&str>,
    cancel: &Cancel,
) -> Option<Value> {
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
/// ([`crate::sites::payload::mentions`], the payload prefilter's sound test), holds no such key and
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
        && !crate::sites::payload::mentions(text, charts)
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
fn k0s_places(
    root: &Value,
    charts: &[String],
    at: &[&str],
    cancel: &Cancel,
) -> Vec<ValuesPlace> {
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
                t.len() <= MAX_VALUES_TEXT_BYTES && crate::sites::payload::mentions(t, charts)
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
fn application_set_places(
    root: &Value,
    charts: &[String],
    cancel: &Cancel,
) -> Vec<ValuesPlace> {
    let Some(template) = root.pointer("/spec/template").filter(|t| t.is_object()) else {
        return Vec::new();
    };
    let prefix = keys(&["spec", "template"]);
    let text = template.to_string();
    if go_templated(&text) || root.pointer("/spec/templatePatch").is_some() {
        if !crate::sites::payload::mentions(&text, charts) {
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

/// Whether `object` carries Helm values for one of the charts the sites document asks for
/// (a GitOps object or values file whose chart reference matches). The admission decoder
/// reads `spec.values`-like subtrees only for these: every other chart's values are skipped
/// unread (an umbrella chart's values are read whole only when they hold the CCM subchart's
/// key), which keeps the memory a review costs independent of foreign charts' values.
pub fn holds_chart_values(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &crate::sites::SitesDocument,
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
