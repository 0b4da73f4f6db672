//! Where an object holds the CCM chart's values: `values_places` and the per-controller place
//! readers (Argo CD, ApplicationSet, Sveltos, Fleet, k0s, kustomize), umbrella subchart keys
//! and the chart generation a delivery pins.

use crate::budget::Cancel;
use crate::sites::chart::{GIANT_SWARM_APP_CHART, chart_matches};
use crate::sites::generation::{Generation, Generations};
use crate::sites::path::{display, shown_entry, value_at};
use crate::yaml::{self, Seg};
use kube::core::DynamicObject;
use serde_json::Value;

/// Largest Helm values string (`valuesContent`, Argo `helm.values`) stackgate parses for the
/// CCM chart, in bytes. The chart's values are a few KiB; parsed YAML costs hundreds of bytes
/// per node, so a larger string is reported as one stackgate cannot check instead.
pub const MAX_VALUES_TEXT_BYTES: usize = 64 * 1024;

/// Most places in one object that carry the CCM chart's values (Argo CD `spec.sources`
/// entries naming the chart, each with `valuesObject` and `values`). Real Applications have one
/// or two; more are reported, and none is read.
pub const MAX_CARRIERS_PER_OBJECT: usize = 8;

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
/// ([`crate::sites::generation`]).
pub const VALUES_FILE_CHART_VERSION_KEY: &str = "chartVersion";

/// The path of `path`'s keys.
pub(super) fn keys(path: &[&str]) -> Vec<Seg> {
    path.iter().map(|k| Seg::key(k)).collect()
}

/// The value at `path` in `root`.
pub(super) fn get<'a>(root: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(root, |v, seg| match seg {
        Seg::Key(k) => v.get(k),
        Seg::Index(i) => v.get(i),
    })
}

/// The string at the keys `path` in `root`.
pub(super) fn str_at<'a>(root: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(root, |v, k| v.get(k))
        .and_then(Value::as_str)
}

/// The object's content as one JSON value (`data` holds everything but apiVersion, kind and
/// metadata, which no carrier path uses).
pub(super) fn content(object: &DynamicObject) -> &Value {
    &object.data
}

/// A place in an object that holds the chart's values.
#[derive(Debug, Clone)]
pub(in crate::sites) struct ValuesPlace {
    /// Path of the values map or of the values string, from the object root.
    pub(in crate::sites) path: Vec<Seg>,
    /// The values are a YAML string (HelmChart `valuesContent`, Argo `helm.values`), not a map.
    pub(in crate::sites) yaml_string: bool,
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
    pub(in crate::sites) alias: Option<String>,
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

/// One place of an object that holds the CCM chart's values, as data: a registry entry's
/// [`crate::sites::delivery::Values::Place`]. Paths are JSON pointers from the object's root
/// (a number is a list index: Azimuth's `/spec/valuesSources/0/template`).
#[derive(Debug, Clone, Copy)]
pub struct Place {
    /// Where the object names its chart; the first that is set is the reference.
    pub chart: &'static [ChartAt],
    /// The values: a map, or a YAML string when `yaml_string`.
    pub values: &'static str,
    /// The values are a YAML string (HelmChart `valuesContent`), not a map.
    pub yaml_string: bool,
    /// Where the object pins the chart version, which decides the chart's generation.
    pub version: Option<&'static str>,
    /// Values the controller hands Helm beneath these, named but not held (Flux
    /// `spec.valuesFrom`): the site is unseen unless these values decide alone.
    pub unseen_beneath: &'static [&'static str],
    /// RKE2/k3s helm-controller `spec.valuesSecrets`: Secret keys mounted as values files
    /// after the object's own values, named but not held.
    pub values_secrets: Option<&'static str>,
    /// RKE2/k3s HelmChart `spec.set`: `--set` entries read over the values.
    pub set: Option<&'static str>,
    /// Structured values Helm reads as a values file after these (helm-controller
    /// `spec.values` after `spec.valuesContent`).
    pub values_over: Option<&'static str>,
    /// Where the object may say that the chart it installs is not the one it names.
    pub chart_unseen: Option<ChartUnseen>,
    /// The synthetic values file of `stackgate check`: its own fields name the umbrella
    /// dependency the values are under ([`VALUES_FILE_SUBCHART_KEY`] and the others).
    pub umbrella_dependency: bool,
}

/// Where an object names the chart its values are for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartAt {
    /// A string field (JSON pointer).
    Field(&'static str),
    /// The object's own name: a RKE2/k3s HelmChartConfig customises the HelmChart of its name,
    /// which need not be named after the chart it installs, so values holding the CCM chart's
    /// own keys are read as the CCM chart's too.
    ObjectName,
}

/// Where an object says the chart that renders its values is not the one it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartUnseen {
    /// An inline chart archive installed in place of the named chart (HelmChart
    /// `spec.chartContent`).
    InlineArchive(&'static str),
    /// A reference to another object that names the chart (Flux `spec.chartRef`), used when
    /// the first [`Place::chart`] field is not set and the reference's name is not the chart.
    Reference(&'static str),
}

/// The reader of a registry entry whose objects hold values in a shape one static place
/// cannot describe (lists of charts or sources, an embedded config): a function over the
/// object, and where in the object it starts.
#[derive(Debug, Clone, Copy)]
pub struct PlaceReader {
    read: fn(&ReaderInput<'_>) -> Vec<ValuesPlace>,
    at: &'static [&'static str],
}

impl PlaceReader {
    /// Argo CD Application sources.
    pub const ARGO: PlaceReader = PlaceReader::new(argo_places, &[]);
    /// Argo CD ApplicationSet templates (read as an Application).
    pub const APPLICATION_SET: PlaceReader = PlaceReader::new(application_set_places, &[]);
    /// Sveltos `spec.helmCharts[]`.
    pub const SVELTOS: PlaceReader = PlaceReader::new(sveltos_places, &[]);
    /// kustomize `helmCharts[]`.
    pub const KUSTOMIZE: PlaceReader = PlaceReader::new(kustomize_places, &[]);

    /// Rancher Fleet `helm` options at `at` (`spec.helm` of a HelmOp or Bundle, `helm` of a
    /// `fleet.yaml`).
    pub const fn fleet(at: &'static [&'static str]) -> PlaceReader {
        PlaceReader::new(fleet_places, at)
    }

    /// A k0s `ClusterConfig` at `at` (the object itself when empty, else the embedded one).
    pub const fn k0s(at: &'static [&'static str]) -> PlaceReader {
        PlaceReader::new(k0s_places, at)
    }

    const fn new(
        read: fn(&ReaderInput<'_>) -> Vec<ValuesPlace>,
        at: &'static [&'static str],
    ) -> PlaceReader {
        PlaceReader { read, at }
    }

    /// The places of `root` holding values of `charts`.
    pub(in crate::sites) fn places(
        &self,
        root: &Value,
        charts: &[String],
        cancel: &Cancel,
    ) -> Vec<ValuesPlace> {
        (self.read)(&ReaderInput {
            root,
            charts,
            at: self.at,
            cancel,
        })
    }
}

/// What a [`PlaceReader`] reads: the object's content, the charts asked for, where in the
/// object it starts and the flag that stops parsing values strings.
struct ReaderInput<'a> {
    root: &'a Value,
    charts: &'a [String],
    at: &'static [&'static str],
    cancel: &'a Cancel,
}

/// A JSON pointer of the registry as a path (a number is a list index).
pub(in crate::sites) fn pointer_path(pointer: &str) -> Vec<Seg> {
    crate::sites::path::slash_separated(pointer)
        .skip(1)
        .map(|k| k.parse::<usize>().map_or_else(|_| Seg::key(k), Seg::Index))
        .collect()
}

/// The places `place` describes in `object` that hold values of the charts in `charts`.
///
/// Values strings are parsed here (to find an umbrella chart's subchart key): once `cancel`
/// fires no more are, and what is returned is not an answer (the caller checks the flag).
pub(in crate::sites) fn read_place(
    object: &DynamicObject,
    described: &Place,
    charts: &[String],
    cancel: &Cancel,
) -> Vec<ValuesPlace> {
    let root = content(object);
    let by_name = described.chart.contains(&ChartAt::ObjectName);
    let chart = described.chart.iter().find_map(|at| match at {
        ChartAt::Field(pointer) => value_at(root, pointer).and_then(Value::as_str),
        ChartAt::ObjectName => object.metadata.name.as_deref(),
    });
    let path = pointer_path(described.values);
    let version = described
        .version
        .and_then(|v| value_at(root, v))
        .and_then(Value::as_str);
    let yaml_string = described.yaml_string;
    let holds_ccm = || match yaml_string {
        true => holds_ccm_values(get(root, &path), cancel),
        false => get(root, &path)
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
    let chart_unseen = chart_not_named(described, root, named).filter(|_| named || holds_ccm());
    let ours = named || (by_name && holds_ccm()) || chart_unseen.is_some();
    let mut place = ValuesPlace {
        path,
        yaml_string,
        unseen: described
            .unseen_beneath
            .iter()
            .map(|p| pointer_path(p))
            .collect(),
        unseen_on_top: described.values_secrets.map(|at| {
            let name = object.metadata.name.clone().unwrap_or_default();
            OnTop::ValuesSecrets(pointer_path(at), name)
        }),
        chart_unseen,
        overrides: described
            .set
            .map(|at| OverrideSource::HelmChartSet(pointer_path(at))),
        values_over: described.values_over.map(pointer_path),
        alias: None,
        generations: generations_of(chart, version),
        switch: Switch::On,
    };
    if described.umbrella_dependency
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
    if chart.is_some_and(|c| chart_matches(c, &[GIANT_SWARM_APP_CHART])) {
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
fn chart_not_named(place: &Place, root: &Value, named: bool) -> Option<(Vec<Seg>, String)> {
    match place.chart_unseen? {
        ChartUnseen::InlineArchive(at) => {
            value_at(root, at)
                .and_then(Value::as_str)
                .filter(|c| !c.trim().is_empty())?;
            let path = pointer_path(at);
            Some((
                path.clone(),
                format!(
                    "the chart archive inlined in {} (its templates and default values, \
                     installed in place of the upstream chart)",
                    display(&path)
                ),
            ))
        }
        ChartUnseen::Reference(_) if named => None,
        ChartUnseen::Reference(at) => {
            // The reference is read only when the first chart field is not set.
            let first = place.chart.first().and_then(|c| match c {
                ChartAt::Field(pointer) => value_at(root, pointer).and_then(Value::as_str),
                ChartAt::ObjectName => None,
            });
            if first.is_some() {
                return None;
            }
            let reference = value_at(root, at)?;
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
            let path = pointer_path(at);
            Some((
                path.clone(),
                format!(
                    "the chart of {} {} ({}), which this HelmRelease does not name",
                    shown_entry(kind),
                    shown_entry(&name),
                    display(&path)
                ),
            ))
        }
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
    match crate::sites::umbrella::could_switch_off(alias, &named) {
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
fn k0s_places(input: &ReaderInput<'_>) -> Vec<ValuesPlace> {
    let &ReaderInput {
        root,
        charts,
        at,
        cancel,
    } = input;
    let Some(list) = at
        .iter()
        .try_fold(root, |v, k| v.get(k))
        .and_then(|config| value_at(config, "/spec/extensions/helm/charts"))
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
fn kustomize_places(input: &ReaderInput<'_>) -> Vec<ValuesPlace> {
    let &ReaderInput { root, charts, .. } = input;
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
fn application_set_places(input: &ReaderInput<'_>) -> Vec<ValuesPlace> {
    let &ReaderInput { root, charts, .. } = input;
    let Some(template) = value_at(root, "/spec/template").filter(|t| t.is_object()) else {
        return Vec::new();
    };
    let prefix = keys(&["spec", "template"]);
    let text = template.to_string();
    if go_templated(&text) || value_at(root, "/spec/templatePatch").is_some() {
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
    argo_places(&ReaderInput {
        root: template,
        ..*input
    })
    .into_iter()
    .map(|place| prefixed(place, &prefix))
    .collect()
}

/// Sveltos `ClusterProfile` / `Profile` `spec.helmCharts[]` whose `chartName` names the chart:
/// `values` (a string Sveltos renders as a Go template with the cluster's objects) is read as
/// YAML when it holds no template syntax, else named as unseen; `valuesFrom` (ConfigMaps and
/// Secrets) is named as unseen over it.
fn sveltos_places(input: &ReaderInput<'_>) -> Vec<ValuesPlace> {
    let &ReaderInput { root, charts, .. } = input;
    let Some(list) = value_at(root, "/spec/helmCharts").and_then(Value::as_array) else {
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
fn fleet_places(input: &ReaderInput<'_>) -> Vec<ValuesPlace> {
    let &ReaderInput {
        root, charts, at, ..
    } = input;
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
fn argo_places(input: &ReaderInput<'_>) -> Vec<ValuesPlace> {
    let &ReaderInput {
        root,
        charts,
        cancel,
        ..
    } = input;
    let mut out = Vec::new();
    let mut sources: Vec<Vec<Seg>> = Vec::new();
    if value_at(root, "/spec/source").is_some_and(Value::is_object) {
        sources.push(keys(&["spec", "source"]));
    }
    if let Some(list) = value_at(root, "/spec/sources").and_then(Value::as_array) {
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
