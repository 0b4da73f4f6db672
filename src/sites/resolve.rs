//! How a controller resolves the values a delivery names but does not hold, in the
//! controller's order, as pure functions over what a face can look in ([`Inputs`]): the
//! registry ([`super::delivery`]) says where such values are named; this says which ones a
//! release reads and in what order. `stackgate check` implements [`Inputs`] over the files and
//! objects of its run (`check/index.rs`) and evaluates the [`Resolved`] object this returns.
//!
//! - **Flux** `HelmRelease` ([`values_from`]; fluxcd/helm-controller
//!   `chartutil.ChartValuesFromReferences`): each `spec.valuesFrom` reference in list order,
//!   its `valuesKey` (default `values.yaml`) parsed as YAML and merged into the values (maps
//!   recursively, anything else replaced), or with `targetPath` set as one value at that path
//!   (Helm `--set` syntax; a quoted value is a string, else typed); then `spec.values` merged on
//!   top. A missing optional reference is skipped, as Flux does. A reference the inputs cannot
//!   resolve stays in the object, so the engine reports it as values it cannot see instead of
//!   assuming the chart's defaults. A `spec.chartRef` to one chart source of the inputs is read
//!   as that chart ([`with_chart_ref`]).
//! - **helm-controller** (RKE2/k3s) `HelmChart` ([`resolve_chart_config`]): its
//!   `valuesContent`, `values` and `valuesSecrets`, then the one `HelmChartConfig` of its name
//!   and namespace (its `valuesContent`, `values`, `valuesSecrets`), in the order
//!   helm-controller mounts them; `spec.set` stays for the carrier to apply on top.
//! - **Argo CD** `Application` value files ([`argo_value_files`]; argoproj/argo-cd
//!   `reposerver/repository/repository.go`, `getHelmRepoAndValueFiles` / `helmTemplate`): each
//!   source's `helm.valueFiles` in list order, a file relative to the source's `path` or, as
//!   `$ref/…`, to the root of the source whose `ref` it names; then `helm.valuesObject` when
//!   set, else the `helm.values` string, on top.
//! - **kustomize** `helmCharts[]` ([`kustomize_values_files`]): the `valuesFile`, then
//!   `valuesInline` over it.
//!
//! Each merged source is a [`Layer`] that knows its input and where its lines are, so
//! [`Resolved::place_of`] tells which file and line set a merged value (the last source that
//! holds it). A Secret's value stays a [`SecretText`] until it is parsed as values, and the
//! one merged value a message prints (`image.tag`) is hidden when a Secret sets it.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

use super::helm::FLUX_DEFAULT_VALUES_KEY;
use super::helm::{MAX_VALUES_TEXT_BYTES, describe_values_reference, helm_controller_secrets};
use super::strvals::SetBudget;
use crate::secret_text::{self, SecretText};
use crate::yaml::{self, Seg};

/// What a face can look in to resolve values a delivery names.
pub trait Inputs {
    /// The one input whose path ends with `suffix` (a normalised relative path): its name and
    /// text. None when no input, or more than one, does: which file the controller reads
    /// cannot then be told.
    fn file(&self, suffix: &Path) -> Option<(&str, &str)>;

    /// The data value `key` of the `kind` (`ConfigMap`, `Secret`) object `name` that an object
    /// in `namespace` refers to: `Ok(Some(found))`, `Ok(None)` when the object exists without
    /// the key, `Err` when the inputs cannot tell (no such object, several that disagree, an
    /// unreadable value).
    fn data(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        key: &str,
    ) -> Result<Option<Found<'_>>, Lookup>;

    /// The RKE2/k3s HelmChartConfigs of the inputs.
    fn chart_configs(&self) -> &[ChartConfig];

    /// The Flux chart sources of the inputs a HelmRelease's `spec.chartRef` may name.
    fn chart_sources(&self) -> &[ChartSource];
}

/// Why a data reference did not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// No such object in the inputs.
    Absent,
    /// Objects that disagree, or a value that cannot be read.
    Unknown,
}

/// `object` with its `spec.valuesFrom` resolved, when it is a Flux HelmRelease with
/// references, or with its sources' `helm.valueFiles` merged in, when it is an Argo CD
/// Application with value files, or with its HelmChartConfig merged in, when it is a
/// RKE2/k3s HelmChart whose HelmChartConfig is among the inputs (helm-controller's order, cited at
/// `resolve_chart_config`); None otherwise.
pub fn resolve(object: &Value, inputs: &impl Inputs) -> Option<Resolved> {
    let api = object.get("apiVersion").and_then(Value::as_str)?;
    if api == "helm.cattle.io/v1" {
        return resolve_chart_config(object, inputs);
    }
    if api == "argoproj.io/v1alpha1"
        && object.get("kind").and_then(Value::as_str) == Some("Application")
    {
        return resolve_value_files(object, inputs);
    }
    if !api.starts_with("helm.toolkit.fluxcd.io/")
        || object.get("kind").and_then(Value::as_str) != Some("HelmRelease")
    {
        return None;
    }
    values_from(object, inputs)
}

/// A Flux HelmRelease with its `spec.chartRef` read as the chart it names ([`with_chart_ref`])
/// and its `spec.valuesFrom` resolved in Flux's order (see the module's documentation), then
/// `spec.values` on top. None when it has neither a resolvable `chartRef` nor references.
pub fn values_from(object: &Value, inputs: &impl Inputs) -> Option<Resolved> {
    // A `chartRef` to a chart source of the inputs: the release is read as that chart.
    let with_chart = with_chart_ref(object, inputs);
    let chart_only = || {
        with_chart.clone().map(|object| Resolved {
            object,
            sources: None,
            layers: Vec::new(),
            merge: Merge::FluxOrArgo,
        })
    };
    let object = with_chart.as_ref().unwrap_or(object);
    let Some(references) = object
        .pointer("/spec/valuesFrom")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
    else {
        return chart_only();
    };
    let namespace = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    let mut merged = Value::Object(Map::new());
    let mut unresolved = Vec::new();
    let mut sources = Vec::new();
    let mut layers = Vec::new();
    // Each merged layer's values and, for a Secret's, the Secret (`ns/name`): a value a
    // message may print is hidden when a Secret sets it.
    let mut origins: Vec<(Value, Option<String>)> = Vec::new();
    // The references' `targetPath`s are applied to one release's values: one list budget.
    let mut budget = SetBudget::default();
    for reference in references {
        let field = |k: &str| reference.get(k).and_then(Value::as_str);
        let optional = reference.get("optional").and_then(Value::as_bool) == Some(true);
        let Some((kind, name, key)) = reference_target(reference) else {
            unresolved.push(reference.clone());
            continue;
        };
        let found = match inputs.data(kind, namespace, name, key) {
            Ok(Some(found)) => found,
            // Flux skips an optional reference whose object or key does not exist.
            Ok(None) | Err(Lookup::Absent) if optional => continue,
            _ => {
                unresolved.push(reference.clone());
                continue;
            }
        };
        let (text, from, place) = found;
        let secret = matches!(text, DataText::Secret(_))
            .then(|| namespace.map_or(name.to_owned(), |ns| format!("{ns}/{name}")));
        let text = text.for_parsing();
        let mut layer_values = Value::Object(Map::new());
        let target = field("targetPath").filter(|t| !t.is_empty());
        let applied = match target {
            Some(target) => set_at_path(&mut layer_values, target, text, &mut budget),
            None => match yaml::parse_one(text).and_then(|n| n.to_json()) {
                Ok(Value::Null) => true,
                Ok(values @ Value::Object(_)) => {
                    layer_values = values;
                    true
                }
                _ => false,
            },
        };
        if !applied {
            unresolved.push(reference.clone());
            continue;
        }
        merge_maps(&mut merged, layer_values.clone());
        origins.push((layer_values.clone(), secret));
        let what = describe_values_reference(reference);
        let label = format!("{what}, from {from}");
        if let Some(place) = place {
            let lines = match (place.line, target) {
                (None, None) => Lines::File(text.to_owned()),
                (None, Some(_)) => Lines::Line(1),
                (Some(line), _) => Lines::Line(line),
            };
            layers.push(Layer {
                label: label.clone(),
                what,
                input: place.input.clone(),
                values: layer_values,
                lines,
            });
        }
        sources.push(label);
    }
    let mut out = object.clone();
    let spec = out.get_mut("spec")?.as_object_mut()?;
    if !unresolved.is_empty() {
        spec.insert("valuesFrom".to_owned(), Value::Array(unresolved));
        return Some(Resolved {
            object: out,
            sources: None,
            layers: Vec::new(),
            merge: Merge::FluxOrArgo,
        });
    }
    if let Some(values) = spec.get("values").filter(|v| v.is_object()) {
        merge_maps(&mut merged, values.clone());
        origins.push((values.clone(), None));
        let field = (vec![Seg::key("spec"), Seg::key("values")], false);
        layers.push(Layer::own("spec.values", values.clone(), Some(field)));
    }
    hide_secret_image_tag(&mut merged, &origins);
    spec.insert("values".to_owned(), merged);
    spec.remove("valuesFrom");
    Some(Resolved {
        object: out,
        sources: Some(sources),
        layers,
        merge: Merge::FluxOrArgo,
    })
}

/// A kustomization (`json`, in input `input` in directory `dir`) with the `valuesFile` of its
/// `helmCharts[]` entries that install the CCM chart resolved from the inputs (`file_at`: the
/// input at a path, by name and text): the file's values with `valuesInline` merged over them,
/// as kustomize writes the one values file it hands to Helm (`valuesMerge: override`, the
/// default; kubernetes-sigs/kustomize @ 12f9e6391464b3ad9dd3fe8182049dc1b1772990,
/// `api/internal/builtins/HelmChartInflationGenerator.go` `replaceValuesInline`). Entries with
/// `additionalValuesFiles` or `valuesMerge: merge` stay named as unseen. Returns the object
/// as `check` evaluates it and the resolved one; None when no entry resolves.
pub fn kustomize_values_files<'a>(
    json: &Value,
    input: &str,
    dir: &Path,
    file_at: impl Fn(&Path) -> Option<(&'a str, &'a str)>,
) -> Option<(Value, Resolved)> {
    let json = super::delivery::synthetic_object(json, input).unwrap_or_else(|| json.clone());
    if json.get("kind").and_then(Value::as_str) != Some("Kustomization") {
        return None;
    }
    let charts: Vec<String> = super::helm::DEFAULT_CHARTS
        .iter()
        .map(|c| (*c).to_owned())
        .collect();
    let mut out = json.clone();
    let mut sources = Vec::new();
    let entries = out
        .get_mut("helmCharts")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten();
    for entry in entries {
        let name = entry.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(file) = entry
            .get("valuesFile")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            continue;
        };
        let merge = entry.get("valuesMerge").and_then(Value::as_str);
        let additional = entry
            .get("additionalValuesFiles")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !super::chart::chart_matches(name, &charts)
            || !matches!(merge, None | Some("override"))
            || additional
        {
            continue;
        }
        let Some((shown, file_text)) = file_at(&dir.join(&file)) else {
            continue;
        };
        let mut values = match yaml::parse_one(file_text).and_then(|n| n.to_json()) {
            Ok(Value::Null) => Value::Object(Map::new()),
            Ok(v @ Value::Object(_)) => v,
            _ => continue,
        };
        if let Some(inline) = entry.get("valuesInline").filter(|v| v.is_object()) {
            merge_maps(&mut values, inline.clone());
        }
        let Some(map) = entry.as_object_mut() else {
            continue;
        };
        map.insert("valuesInline".to_owned(), values);
        map.remove("valuesFile");
        sources.push(format!(
            "values file {file} of the kustomization, from {shown}"
        ));
    }
    if sources.is_empty() {
        return None;
    }
    let resolved = Resolved {
        object: out,
        sources: Some(sources),
        layers: Vec::new(),
        merge: Merge::FluxOrArgo,
    };
    Some((json, resolved))
}

/// The objects among `named` (those of the kind and name a release refers to) that a release
/// in `namespace` reads: those in its namespace; else those whose namespace is left to the
/// deployment (kustomize's `namespace:`, `kubectl -n`), on either side.
pub fn in_release_namespace<'a, T>(
    named: impl Iterator<Item = &'a T> + Clone,
    namespace_of: impl Fn(&T) -> Option<&str>,
    namespace: Option<&str>,
) -> Vec<&'a T> {
    let same: Vec<&T> = named
        .clone()
        .filter(|o| namespace_of(o).is_some() && namespace_of(o) == namespace)
        .collect();
    if !same.is_empty() {
        return same;
    }
    named
        .filter(|o| namespace_of(o).is_none() || namespace.is_none())
        .collect()
}

/// `release` with its `spec.chartRef` replaced by the chart and version of the one chart
/// source of the inputs it names (as `spec.chart.spec`, so the release is read as the chart
/// it installs); None when it has no `chartRef`, or the inputs hold no such source or
/// several that disagree.
pub fn with_chart_ref(release: &Value, inputs: &impl Inputs) -> Option<Value> {
    let reference = release.pointer("/spec/chartRef")?;
    if release.pointer("/spec/chart").is_some() {
        return None;
    }
    let kind = reference.get("kind").and_then(Value::as_str)?;
    let name = reference.get("name").and_then(Value::as_str)?;
    let namespace = reference
        .get("namespace")
        .or_else(|| release.pointer("/metadata/namespace"))
        .and_then(Value::as_str);
    let candidates = in_release_namespace(
        inputs
            .chart_sources()
            .iter()
            .filter(|s| s.kind == kind && s.name == name),
        |s| s.namespace.as_deref(),
        namespace,
    );
    let first = candidates.first()?;
    if candidates
        .iter()
        .any(|c| c.chart != first.chart || c.version != first.version)
    {
        return None;
    }
    let mut out = release.clone();
    let spec = out.get_mut("spec")?.as_object_mut()?;
    spec.remove("chartRef");
    let mut chart = Map::new();
    chart.insert("chart".to_owned(), Value::String(first.chart.clone()));
    if let Some(version) = &first.version {
        chart.insert("version".to_owned(), Value::String(version.clone()));
    }
    let mut outer = Map::new();
    outer.insert("spec".to_owned(), Value::Object(chart));
    spec.insert("chart".to_owned(), Value::Object(outer));
    Some(out)
}

/// The HelmChartConfigs that customise the HelmChart `name` in `namespace` (same name; same
/// namespace, or one left to the deployment on either side).
fn configs_for<'a>(
    inputs: &'a impl Inputs,
    namespace: Option<&str>,
    name: &str,
) -> Vec<&'a ChartConfig> {
    let named = || {
        inputs
            .chart_configs()
            .iter()
            .filter(move |c| c.name == name)
    };
    let exact: Vec<&ChartConfig> = named()
        .filter(|c| c.namespace.is_some() && c.namespace.as_deref() == namespace)
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    named()
        .filter(|c| c.namespace.is_none() || namespace.is_none())
        .collect()
}

/// When `object` is a HelmChartConfig whose HelmChart is in this run and is evaluated with
/// it merged in: that HelmChart's name. Its findings are then reported through the
/// HelmChart (at this object's lines), so the HelmChartConfig is not evaluated alone.
pub fn config_merged_into(
    object: &Value,
    helm_charts: &[Value],
    inputs: &impl Inputs,
) -> Option<String> {
    let (namespace, name) = helm_cattle_key(object, "HelmChartConfig")?;
    helm_charts.iter().find_map(|chart| {
        let (ns, n) = helm_cattle_key(chart, "HelmChart")?;
        let configs = configs_for(inputs, ns.as_deref(), &n);
        let same = n == name && matches!(configs.as_slice(), [c] if c.namespace == namespace);
        // Resolved only with exactly one HelmChartConfig of the name: this one.
        resolve_chart_config(chart, inputs)
            .filter(|_| same)
            .map(|_| match ns.as_deref().or(namespace.as_deref()) {
                Some(ns) => format!("{ns}/{n}"),
                None => n.clone(),
            })
    })
}

/// A RKE2/k3s HelmChart with the values of the one HelmChartConfig of its name merged in
/// helm-controller's order; None without such a HelmChartConfig among the inputs, or when the
/// values cannot be read (the HelmChart is then evaluated alone, with its caveat).
///
/// helm-controller (k3s-io/helm-controller @ 21a911f, `pkg/controllers/chart/chart.go`:
/// `setValuesSecret`, `valuesSecretAddConfig`, `args`) mounts the values as files named
/// `values-0-000-HelmChart-ValuesContent.yaml`, `values-0-001-HelmChart-Values.yaml`,
/// `values-1-000-HelmChartConfig-ValuesContent.yaml`,
/// `values-1-001-HelmChartConfig-Values.yaml` (then each object's `valuesSecrets`), which
/// the job passes to Helm as `--values` in name order, and the HelmChart's `spec.set` as
/// `--set`/`--set-string` arguments, which Helm applies over every values file. So the
/// HelmChartConfig wins over the HelmChart's values, and `spec.set` wins over both.
pub fn resolve_chart_config(object: &Value, inputs: &impl Inputs) -> Option<Resolved> {
    let (namespace, name) = helm_cattle_key(object, "HelmChart")?;
    let configs = configs_for(inputs, namespace.as_deref(), &name);
    let chart_secrets = values_secrets_of(object);
    // With no HelmChartConfig, a HelmChart is resolved for its `valuesSecrets` alone.
    let config = match configs.as_slice() {
        [config] => Some(*config),
        [] if !chart_secrets.is_empty() => None,
        _ => return None,
    };
    let mut layers = Vec::new();
    let spec_field = |f: &str| vec![Seg::key("spec"), Seg::key(f)];
    match object.pointer("/spec/valuesContent") {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => match yaml::parse_one(text).and_then(|n| n.to_json()) {
            Ok(Value::Null) => {}
            Ok(values @ Value::Object(_)) => layers.push(Layer::own(
                "spec.valuesContent",
                values,
                Some((spec_field("valuesContent"), true)),
            )),
            _ => return None,
        },
        Some(_) => return None,
    }
    match object.pointer("/spec/values") {
        None | Some(Value::Null) => {}
        Some(values @ Value::Object(_)) => layers.push(Layer::own(
            "spec.values",
            values.clone(),
            Some((spec_field("values"), false)),
        )),
        Some(_) => return None,
    }
    // Each layer's values and, for a Secret's, the Secret: a value a message may print is
    // hidden when a Secret sets it last.
    let mut origins: Vec<(Value, Option<String>)> =
        layers.iter().map(|l| (l.values.clone(), None)).collect();
    let shown = |n: &str| match namespace.as_deref() {
        Some(ns) => format!("{ns}/{n}"),
        None => n.to_owned(),
    };
    secret_layers(
        inputs,
        namespace.as_deref(),
        &chart_secrets,
        &format!("HelmChart {}", shown(&name)),
        &mut layers,
        &mut origins,
    )?;
    if let Some(config) = config {
        for layer in config.layers.as_ref()? {
            origins.push((layer.values.clone(), None));
            layers.push(layer.clone());
        }
        secret_layers(
            inputs,
            namespace.as_deref().or(config.namespace.as_deref()),
            &config.secrets,
            &format!("HelmChartConfig {}", shown(&name)),
            &mut layers,
            &mut origins,
        )?;
    }
    let mut merged = Value::Object(Map::new());
    for layer in &layers {
        merge_maps(&mut merged, layer.values.clone());
    }
    hide_secret_image_tag(&mut merged, &origins);
    let mut out = object.clone();
    let spec = out.get_mut("spec")?.as_object_mut()?;
    spec.remove("valuesSecrets");
    // The carrier reads `spec.valuesContent`; JSON is YAML, one key per line. Characters
    // the YAML reader takes as line breaks (as go-yaml does) stay escaped. Merged values
    // too large for the carrier are not evaluated merged (each object is, alone).
    let text = serde_json::to_string_pretty(&merged)
        .ok()?
        .replace('\u{85}', "\\u0085")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    if text.len() > MAX_VALUES_TEXT_BYTES {
        return None;
    }
    spec.insert("valuesContent".to_owned(), Value::String(text));
    spec.remove("values");
    let sources = layers
        .iter()
        .map(|l| match l.lines {
            Lines::Own(_) => format!("the HelmChart's {}", l.label),
            _ => l.label.clone(),
        })
        .collect();
    Some(Resolved {
        object: out,
        sources: Some(sources),
        layers,
        merge: Merge::HelmChartConfig,
    })
}

/// Appends the values layers of helm-controller `valuesSecrets` entries (`secrets`, of the
/// object `owner` names, in `namespace`) in mount order: each key's text read as a values
/// file. None when one cannot be resolved from the inputs (no such Secret; no such key unless
/// the entry is optional, which helm-controller then skips; values that are not a map).
fn secret_layers(
    inputs: &impl Inputs,
    namespace: Option<&str>,
    secrets: &[ValuesSecret],
    owner: &str,
    layers: &mut Vec<Layer>,
    origins: &mut Vec<(Value, Option<String>)>,
) -> Option<()> {
    for secret in secrets {
        for key in &secret.keys {
            let (text, from, place) = match inputs.data("Secret", namespace, &secret.name, key) {
                Ok(Some(found)) => found,
                // helm-controller mounts an optional Secret's missing key as nothing. A
                // Secret absent from the inputs may still be in the cluster (values kept out
                // of Git): it stays named as unseen, optional or not.
                Ok(None) if secret.optional => continue,
                _ => return None,
            };
            let values = match yaml::parse_one(text.for_parsing()).and_then(|n| n.to_json()) {
                Ok(Value::Null) => continue,
                Ok(values @ Value::Object(_)) => values,
                _ => return None,
            };
            let what = format!(
                "Secret {} key {key} ({owner} spec.valuesSecrets)",
                secret.name
            );
            let label = format!("{what}, from {from}");
            let lines = match place.and_then(|p| p.line) {
                Some(line) => Lines::Line(line),
                None => Lines::File(text.for_parsing().to_owned()),
            };
            origins.push((
                values.clone(),
                Some(namespace.map_or(secret.name.clone(), |ns| format!("{ns}/{}", secret.name))),
            ));
            layers.push(Layer {
                label,
                what,
                input: place.map(|p| p.input.clone()).unwrap_or_default(),
                values,
                lines,
            });
        }
    }
    Some(())
}

/// An Argo CD Application with the `helm.valueFiles` of its sources merged beneath
/// `helm.valuesObject` (or `helm.values`), when each file is among the inputs; files that
/// are not stay named for the engine to report. None without value files.
pub fn resolve_value_files(object: &Value, inputs: &impl Inputs) -> Option<Resolved> {
    let mut out = object.clone();
    let mut any = false;
    let mut complete = true;
    let mut sources = Vec::new();
    let mut layers = Vec::new();
    for source in argo_value_files(object, inputs) {
        any = true;
        let pointer = &source.pointer;
        let mut merged = Value::Object(Map::new());
        let mut unresolved = Vec::new();
        for file in source.files {
            let file_name = file.file;
            match file.found {
                Some(found) => {
                    merge_maps(&mut merged, found.values.clone());
                    let shown = pointer.trim_start_matches('/').replace('/', ".");
                    let label = format!("value file {file_name} of {shown}, from {}", found.name);
                    layers.push(Layer {
                        label: label.clone(),
                        what: format!("value file {file_name} of {shown}"),
                        input: found.name.to_owned(),
                        values: found.values,
                        lines: Lines::File(found.text.to_owned()),
                    });
                    sources.push(label);
                }
                None => unresolved.push(Value::String(file_name.to_owned())),
            }
        }
        let helm = out
            .pointer_mut(&format!("{pointer}/helm"))?
            .as_object_mut()?;
        if !unresolved.is_empty() {
            complete = false;
            helm.insert("valueFiles".to_owned(), Value::Array(unresolved));
            continue;
        }
        let Some(top) = argo_values_over_files(helm) else {
            // An unreadable values string: left for the engine to report.
            complete = false;
            continue;
        };
        if top.is_object() {
            merge_maps(&mut merged, top.clone());
            layers.push(Layer::own("helm values", top, None));
        }
        helm.insert("valuesObject".to_owned(), merged);
        helm.remove("values");
        helm.remove("valueFiles");
    }
    any.then_some(Resolved {
        object: out,
        sources: complete.then_some(sources),
        layers: if complete { layers } else { Vec::new() },
        merge: Merge::FluxOrArgo,
    })
}

/// A RKE2/k3s HelmChartConfig: it customises the HelmChart of its name and namespace.
#[derive(Debug)]
pub struct ChartConfig {
    namespace: Option<String>,
    name: String,
    /// Its values layers (`spec.valuesContent`, then `spec.values`), None when one cannot be
    /// read (not YAML, not a map): the HelmChart's merged values cannot be known.
    layers: Option<Vec<Layer>>,
    /// Its `spec.valuesSecrets` entries helm-controller mounts after those layers.
    secrets: Vec<ValuesSecret>,
}

impl ChartConfig {
    /// The HelmChartConfig the YAML document `root` of input `input` (whose text is `source`)
    /// is, if it is one: its values layers (`spec.valuesContent`, then `spec.values`) and the
    /// `spec.valuesSecrets` helm-controller mounts after them.
    pub fn read(root: &yaml::Node, source: &str, input: &str) -> Option<Self> {
        let json = root.to_json().ok()?;
        let (namespace, name) = helm_cattle_key(&json, "HelmChartConfig")?;
        let line = root.start.line;
        let what = |field: &str| {
            let ns = namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default();
            format!("HelmChartConfig {ns}{name} {field}")
        };
        let label = |w: &str| format!("{w}, from {input}:{line}");
        let layers = config_layers(root, source, input, what, label);
        Some(ChartConfig {
            namespace,
            name,
            layers,
            secrets: values_secrets_of(&json),
        })
    }
}

/// The Secret data keys a RKE2/k3s HelmChart and its HelmChartConfig read through
/// `valuesSecrets`, as (the HelmChart's namespace, Secret name, key), in mount order.
pub fn values_secrets_read(
    chart: &Value,
    inputs: &impl Inputs,
) -> Vec<(Option<String>, String, String)> {
    let Some((namespace, name)) = helm_cattle_key(chart, "HelmChart") else {
        return Vec::new();
    };
    let configs = configs_for(inputs, namespace.as_deref(), &name);
    let secrets = values_secrets_of(chart)
        .into_iter()
        .chain(configs.iter().flat_map(|c| c.secrets.iter().cloned()));
    let mut out = Vec::new();
    for secret in secrets {
        for key in secret.keys {
            out.push((namespace.clone(), secret.name.clone(), key));
        }
    }
    out
}

/// One mounted entry of a helm-controller `spec.valuesSecrets`: the Secret, its keys in mount
/// order, and whether it is optional (`ignoreUpdates`).
#[derive(Debug, Clone)]
struct ValuesSecret {
    name: String,
    keys: Vec<String>,
    optional: bool,
}

/// The mounted `spec.valuesSecrets` entries of a helm.cattle.io object.
fn values_secrets_of(json: &Value) -> Vec<ValuesSecret> {
    let own = format!(
        "chart-values-{}",
        json.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    );
    let Some(list) = json.pointer("/spec/valuesSecrets") else {
        return Vec::new();
    };
    helm_controller_secrets(list, &own)
        .map(|(name, keys, optional)| ValuesSecret {
            name: name.to_owned(),
            keys: keys.into_iter().map(str::to_owned).collect(),
            optional,
        })
        .collect()
}

/// A Flux chart source a HelmRelease's `spec.chartRef` can name: an `OCIRepository` (the
/// chart is the last path segment of `spec.url`, its version `spec.ref.tag` or
/// `spec.ref.semver`) or a source `HelmChart` (`spec.chart`, `spec.version`).
#[derive(Debug)]
pub struct ChartSource {
    kind: &'static str,
    namespace: Option<String>,
    name: String,
    chart: String,
    version: Option<String>,
}

impl ChartSource {
    /// The chart source `json` is, if it is one.
    pub fn of(json: &Value) -> Option<Self> {
        let api = json.get("apiVersion").and_then(Value::as_str)?;
        if !api.starts_with("source.toolkit.fluxcd.io/") {
            return None;
        }
        let at = |p: &str| {
            json.pointer(p)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let (kind, chart, version) = match json.get("kind").and_then(Value::as_str)? {
            "OCIRepository" => {
                let url = at("/spec/url")?.trim_end_matches('/');
                let chart = url.rsplit('/').next().filter(|c| !c.contains("://"))?;
                let version = at("/spec/ref/tag").or_else(|| at("/spec/ref/semver"));
                ("OCIRepository", chart, version)
            }
            "HelmChart" => ("HelmChart", at("/spec/chart")?, at("/spec/version")),
            _ => return None,
        };
        Some(ChartSource {
            kind,
            namespace: at("/metadata/namespace").map(str::to_owned),
            name: at("/metadata/name")?.to_owned(),
            chart: chart.to_owned(),
            version: version.map(str::to_owned),
        })
    }
}

/// A data value found for a reference: its text, where it was read from (for messages) and
/// where its lines are.
pub type Found<'a> = (&'a DataText, &'a str, Option<&'a DataPlace>);

/// A data value: a Secret's is [`SecretText`], which cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataText {
    /// A ConfigMap's value.
    Plain(String),
    /// A Secret's value (`data`, `stringData`, a `secretGenerator` file or literal).
    Secret(SecretText),
}

impl DataText {
    /// `text` as a value of a `kind` object.
    pub fn of(kind: &str, text: String) -> Self {
        if kind == "Secret" {
            DataText::Secret(SecretText::new(text))
        } else {
            DataText::Plain(text)
        }
    }

    /// The text, for the values parser (never for a message: a value that reaches one from a
    /// Secret is replaced by [`secret_text::not_shown`] first, see `hide_secret_image_tag`).
    pub fn for_parsing(&self) -> &str {
        match self {
            DataText::Plain(text) => text,
            DataText::Secret(text) => text.expose(),
        }
    }
}

/// Where a data value of the index is written.
#[derive(Debug, Clone)]
pub struct DataPlace {
    /// The input it is written in.
    pub input: String,
    /// None when the value is the input's whole text; else the line the object starts at.
    pub line: Option<usize>,
}

/// The object kind, name and data key a `valuesFrom` reference reads (`valuesKey` defaults to
/// `values.yaml`); None when kind or name is missing.
pub fn reference_target(reference: &Value) -> Option<(&str, &str, &str)> {
    let field = |k: &str| reference.get(k).and_then(Value::as_str);
    Some((
        field("kind")?,
        field("name")?,
        field("valuesKey").unwrap_or(FLUX_DEFAULT_VALUES_KEY),
    ))
}

/// A HelmRelease with its `valuesFrom` resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The object to evaluate: `spec.values` holds the merged values and `spec.valuesFrom` is
    /// gone when every reference resolved; otherwise only the unresolved references are left.
    pub object: Value,
    /// When every reference resolved: what the values came from, in merge order
    /// (`Secret occm-values key values.yaml, from helm-values/values.yaml`), for messages.
    pub sources: Option<Vec<String>>,
    /// When every reference resolved: each source of the merged values with where its lines
    /// are, in merge order (the last that sets a value is where it comes from).
    pub layers: Vec<Layer>,
    /// Whose merge order this is (for messages).
    pub merge: Merge,
}

/// Whose merge produced a [`Resolved`] object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Flux `valuesFrom` or Argo CD `valueFiles`: the object's own values are merged last.
    FluxOrArgo,
    /// RKE2/k3s helm-controller: the HelmChart's values, then its HelmChartConfig's, then the
    /// HelmChart's `spec.set` on top.
    HelmChartConfig,
}

impl Merge {
    /// The field of the resolved object that holds the merged values as a YAML text the
    /// resolver wrote (HelmChart `spec.valuesContent`): its lines are no file's lines. None
    /// when the merged values are a map.
    pub fn merged_text_field(self) -> Option<Vec<Seg>> {
        match self {
            Merge::HelmChartConfig => Some(vec![Seg::key("spec"), Seg::key("valuesContent")]),
            Merge::FluxOrArgo => None,
        }
    }
}

/// `object` with only its own values: without the values it names but does not hold (Flux
/// `spec.valuesFrom`, the `helm.valueFiles` of each Argo CD source), which a resolver merges
/// beneath them. What a fix of the object's own values is evaluated on.
pub fn own_values_only(object: &Value) -> Value {
    let mut own = object.clone();
    if let Some(spec) = own.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("valuesFrom");
        if let Some(helm) = spec
            .get_mut("source")
            .and_then(|s| s.get_mut("helm"))
            .and_then(Value::as_object_mut)
        {
            helm.remove("valueFiles");
        }
        for source in spec
            .get_mut("sources")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(helm) = source.get_mut("helm").and_then(Value::as_object_mut) {
                helm.remove("valueFiles");
            }
        }
    }
    own
}

/// One source of merged values: what it is, the input it is written in, its values, and
/// where their lines are.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// What and where, for messages (`HelmChartConfig kube-system/occm spec.valuesContent,
    /// from rke2/config.yaml:1`).
    pub label: String,
    /// What, without where (`HelmChartConfig kube-system/occm spec.valuesContent`).
    what: String,
    /// The input it is written in (empty for the object's own values).
    pub input: String,
    values: Value,
    lines: Lines,
}

/// Where the lines of a [`Layer`]'s values are.
#[derive(Debug, Clone, PartialEq)]
enum Lines {
    /// The values are the whole text of the input (a values file).
    File(String),
    /// The values are a YAML string in the input: the string's node and the input's text.
    Scalar { node: yaml::Node, source: String },
    /// The values are a structured node of the input.
    Tree(yaml::Node),
    /// Only the line of the object that holds them is known (base64 data, `targetPath`).
    Line(usize),
    /// The object's own values, in the field at this path (a YAML string when the flag is
    /// set); None where `check` locates the object's own findings anyway.
    Own(Option<(Vec<Seg>, bool)>),
}

/// Where a merged value is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// In another input (or another object of the same input) than the evaluated object.
    Input {
        /// The input's name.
        input: String,
        /// 1-based line.
        line: usize,
        /// What sets it (`Secret occm-values key values.yaml`).
        what: String,
    },
    /// In the evaluated object's own values: the field that holds them, and whether it is a
    /// YAML string (None: where `check` locates the object's findings anyway).
    Own(Option<(Vec<Seg>, bool)>),
}

impl Layer {
    fn own(label: &str, values: Value, field: Option<(Vec<Seg>, bool)>) -> Self {
        Layer {
            label: label.to_owned(),
            what: label.to_owned(),
            input: String::new(),
            values,
            lines: Lines::Own(field),
        }
    }

    /// Whether this layer's values hold `path`.
    fn sets(&self, path: &[String]) -> bool {
        let mut node = &self.values;
        for key in path {
            match node.get(key) {
                Some(next) => node = next,
                None => return false,
            }
        }
        true
    }

    /// The line of the key of `path` in this layer's input.
    fn line_of(&self, path: &[String]) -> Option<usize> {
        let key_line = |root: &yaml::Node| {
            let (last, parents) = path.split_last()?;
            let segs: Vec<Seg> = parents.iter().map(|k| Seg::key(k)).collect();
            let (key, _) = root.at(&segs)?.entry(last)?;
            Some(key.start.line)
        };
        match &self.lines {
            Lines::File(text) => key_line(&yaml::parse_one(text).ok()?),
            Lines::Tree(node) => key_line(node),
            Lines::Scalar { node, source } => {
                let inner = key_line(&yaml::parse_one(node.scalar()?).ok()?)?;
                Some(yaml::line_within_scalar(source, node, inner))
            }
            Lines::Line(line) => Some(*line),
            Lines::Own(_) => None,
        }
    }
}

impl Resolved {
    /// Where the merged value at `path` (values keys) is set: by the last layer that holds it.
    /// None when no layer does (a chart default) or the value is a map (merged from several).
    pub fn place_of(&self, path: &[String]) -> Option<Place> {
        let layer = self.layers.iter().rev().find(|l| l.sets(path))?;
        let mut merged = Value::Object(Map::new());
        for l in &self.layers {
            merge_maps(&mut merged, l.values.clone());
        }
        let value = path.iter().try_fold(&merged, |v, k| v.get(k))?;
        if value.is_object() {
            return None;
        }
        if let Lines::Own(field) = &layer.lines {
            return Some(Place::Own(field.clone()));
        }
        Some(Place::Input {
            input: layer.input.clone(),
            line: layer.line_of(path)?,
            what: layer.what.clone(),
        })
    }
}

/// Hides the merged `image.tag` when the last layer that sets it is a Secret's: the one value
/// of the merged values a message prints (`values image.tag …`, the CCM release a rule names).
/// The release the rules read stays: the tag's leading `v1.Y.Z` is kept, followed by
/// [`secret_text::not_shown`], which the message prints in its place.
fn hide_secret_image_tag(merged: &mut Value, origins: &[(Value, Option<String>)]) {
    let set_by = origins
        .iter()
        .rev()
        .find(|(values, _)| values.pointer("/image/tag").is_some());
    let Some((_, Some(secret))) = set_by else {
        return;
    };
    let Some(tag) = merged.pointer_mut("/image/tag") else {
        return;
    };
    let marker = secret_text::not_shown(secret);
    *tag = Value::String(match tag.as_str().and_then(release_prefix) {
        Some(release) => format!("{release} {marker}"),
        None => marker,
    });
}

/// The `v1.Y.Z` a CCM image tag starts with (`v1.31.0` of `v1.31.0-rc.1`), if it does.
fn release_prefix(tag: &str) -> Option<&str> {
    let tag = tag.trim();
    let rest = tag.strip_prefix("v1.")?;
    let minor = rest.bytes().take_while(u8::is_ascii_digit).count();
    let after = rest[minor..].strip_prefix('.')?;
    let patch = after.bytes().take_while(u8::is_ascii_digit).count();
    (minor > 0 && patch > 0).then(|| &tag[..3 + minor + 1 + patch])
}

/// The (namespace, name) of a `helm.cattle.io/v1` object of `kind`.
pub fn helm_cattle_key(json: &Value, kind: &str) -> Option<(Option<String>, String)> {
    if json.get("apiVersion").and_then(Value::as_str) != Some("helm.cattle.io/v1")
        || json.get("kind").and_then(Value::as_str) != Some(kind)
    {
        return None;
    }
    let name = json.pointer("/metadata/name")?.as_str()?.to_owned();
    let namespace = json
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Some((namespace, name))
}

/// The values layers of a HelmChartConfig document (`spec.valuesContent`, then
/// `spec.values`, as helm-controller orders them), or None when one cannot be read (its
/// `spec.valuesSecrets` come after these, [`secret_layers`]).
fn config_layers(
    root: &yaml::Node,
    source: &str,
    input: &str,
    what: impl Fn(&str) -> String,
    label: impl Fn(&str) -> String,
) -> Option<Vec<Layer>> {
    let json = root.to_json().ok()?;
    let mut layers = Vec::new();
    if let Some(node) = root.at(&[Seg::key("spec"), Seg::key("valuesContent")]) {
        match json.pointer("/spec/valuesContent") {
            Some(Value::Null) | None => {}
            Some(Value::String(text)) => match yaml::parse_one(text).and_then(|n| n.to_json()) {
                Ok(Value::Null) => {}
                Ok(values @ Value::Object(_)) => layers.push(Layer {
                    label: label(&what("spec.valuesContent")),
                    what: what("spec.valuesContent"),
                    input: input.to_owned(),
                    values,
                    lines: Lines::Scalar {
                        node: node.clone(),
                        source: source.to_owned(),
                    },
                }),
                _ => return None,
            },
            Some(_) => return None,
        }
    }
    if let Some(node) = root.at(&[Seg::key("spec"), Seg::key("values")]) {
        match node.to_json().ok()? {
            Value::Null => {}
            values @ Value::Object(_) => layers.push(Layer {
                label: label(&what("spec.values")),
                what: what("spec.values"),
                input: input.to_owned(),
                values,
                lines: Lines::Tree(node.clone()),
            }),
            _ => return None,
        }
    }
    Some(layers)
}

/// Merges `over` into `base` as Flux's `transform.MergeMaps` does: maps recursively, any other
/// value replaces.
pub fn merge_maps(base: &mut Value, over: Value) {
    let (Value::Object(b), Value::Object(o)) = (&mut *base, over.clone()) else {
        *base = over;
        return;
    };
    for (k, v) in o {
        match b.get_mut(&k) {
            Some(existing) if existing.is_object() && v.is_object() => merge_maps(existing, v),
            _ => {
                b.insert(k, v);
            }
        }
    }
}

/// Sets `path` to `value` as Flux's `ReplacePathValue` (fluxcd/pkg `chartutil`) does: the
/// text `path=value` read by Helm's `--set` parser ([`crate::sites::strvals`], list indexes
/// and escapes included), as `--set-string` with the quotes trimmed when the value is in
/// single or double quotes, else typed. False, with `values` unchanged, where Helm's parser
/// fails (Flux then fails the release too).
fn set_at_path(values: &mut Value, path: &str, value: &str, budget: &mut SetBudget) -> bool {
    use crate::sites::strvals::{Typing, parse_into_within};
    let quoted = |q: char| value.starts_with(q) && value.ends_with(q);
    let (typing, value) = if quoted('\'') || quoted('"') {
        (Typing::Strings, value.trim_matches(['\'', '"']))
    } else {
        (Typing::Typed, value)
    };
    let mut map = match values {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    if parse_into_within(&format!("{path}={value}"), &mut map, typing, budget).is_err() {
        return false;
    }
    *values = Value::Object(map);
    true
}

/// One value file of an Argo CD source, as named and as resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueFile<'a> {
    /// The file as the source names it (`values-prod.yaml`, `$values/occm/values.yaml`).
    pub file: &'a str,
    /// The input it is, with its values (an empty file is an empty map); None when it is not
    /// one input of the run or its values are not a map.
    pub found: Option<FoundFile<'a>>,
}

/// The input a value file resolved to.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundFile<'a> {
    /// The input's name.
    pub name: &'a str,
    /// The input's text.
    pub text: &'a str,
    /// Its values.
    pub values: Value,
}

/// The value files of one Argo CD source, in the order Argo CD hands them to Helm.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgoSourceFiles<'a> {
    /// JSON pointer of the source (`/spec/source`, `/spec/sources/0`).
    pub pointer: String,
    /// Its `helm.valueFiles`, in order (never empty).
    pub files: Vec<ValueFile<'a>>,
}

/// The sources of an Argo CD Application that name value files, each file resolved from
/// `inputs`.
pub fn argo_value_files<'a>(
    object: &'a Value,
    inputs: &'a impl Inputs,
) -> Vec<ArgoSourceFiles<'a>> {
    argo_sources(object)
        .into_iter()
        .filter_map(|(pointer, source)| {
            let files: Vec<ValueFile<'a>> = value_files(source)
                .map(|file| ValueFile {
                    file,
                    found: value_file_suffix(source, file)
                        .and_then(|suffix| inputs.file(&suffix))
                        .and_then(|(name, text)| {
                            let values = match yaml::parse_one(text).and_then(|n| n.to_json()) {
                                Ok(Value::Null) => Value::Object(Map::new()),
                                Ok(v @ Value::Object(_)) => v,
                                _ => return None,
                            };
                            Some(FoundFile { name, text, values })
                        }),
                })
                .collect();
            (!files.is_empty()).then_some(ArgoSourceFiles { pointer, files })
        })
        .collect()
}

/// The values Argo CD passes after a source's value files: `valuesObject` when set, else the
/// `values` string parsed; `Null` when neither is set. None when the string is not YAML.
pub fn argo_values_over_files(helm: &Map<String, Value>) -> Option<Value> {
    match (helm.get("valuesObject"), helm.get("values")) {
        (Some(o), _) if !o.is_null() => Some(o.clone()),
        (_, Some(Value::String(t))) => yaml::parse_one(t).and_then(|n| n.to_json()).ok(),
        _ => Some(Value::Null),
    }
}

/// The sources of an Argo CD Application, with their JSON pointers (`/spec/source`,
/// `/spec/sources/0`).
pub fn argo_sources(object: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    if let Some(source) = object.pointer("/spec/source").filter(|s| s.is_object()) {
        out.push(("/spec/source".to_owned(), source));
    }
    if let Some(list) = object.pointer("/spec/sources").and_then(Value::as_array) {
        out.extend(
            list.iter()
                .enumerate()
                .map(|(i, s)| (format!("/spec/sources/{i}"), s)),
        );
    }
    out
}

/// A source's `helm.valueFiles`.
pub fn value_files(source: &Value) -> impl Iterator<Item = &str> {
    source
        .pointer("/helm/valueFiles")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The path suffix a value file has in the repository: relative to the source's `path` (a Git
/// source), or after the `$ref/` of a multi-source reference (the referenced repository's
/// root). None for a file inside a packaged chart or at a URL, which no input can be.
pub fn value_file_suffix(source: &Value, file: &str) -> Option<PathBuf> {
    if file.contains("://") {
        return None;
    }
    let suffix = match file.strip_prefix('$') {
        Some(reference) => normalize(Path::new(reference.split_once('/')?.1)),
        None => {
            let base = source.get("path").and_then(Value::as_str)?;
            normalize(&Path::new(base).join(file))
        }
    };
    (!suffix.as_os_str().is_empty() && !suffix.starts_with("..")).then_some(suffix)
}

/// `path` without `.` components and with `..` applied, lexically (the inputs were found by
/// walking, so both sides are spelled the same way).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A value file as named, and the input it resolved to.
    type FileShape<'a> = (&'a str, Option<&'a str>);

    /// A ConfigMap or Secret of a test run: kind, namespace, name, and its data keys with their
    /// texts (None: a value that cannot be read).
    type Object = (
        &'static str,
        Option<&'static str>,
        &'static str,
        Vec<(&'static str, Option<DataText>)>,
    );

    /// What a test run holds: files by path, ConfigMaps and Secrets, HelmChartConfigs.
    #[derive(Default)]
    struct Run {
        files: Vec<(&'static str, &'static str)>,
        objects: Vec<Object>,
        configs: Vec<ChartConfig>,
        sources: Vec<ChartSource>,
    }

    /// Where every test object's data is written.
    static PLACE: DataPlace = DataPlace {
        input: String::new(),
        line: Some(7),
    };

    impl Inputs for Run {
        fn file(&self, suffix: &Path) -> Option<(&str, &str)> {
            let mut found = self
                .files
                .iter()
                .filter(|(p, _)| Path::new(p).ends_with(suffix));
            let (path, text) = found.next()?;
            found.next().is_none().then_some((*path, *text))
        }

        fn data(
            &self,
            kind: &str,
            namespace: Option<&str>,
            name: &str,
            key: &str,
        ) -> Result<Option<Found<'_>>, Lookup> {
            let (.., data) = self
                .objects
                .iter()
                .find(|(k, ns, n, _)| *k == kind && *ns == namespace && *n == name)
                .ok_or(Lookup::Absent)?;
            match data.iter().find(|(k, _)| *k == key) {
                None => Ok(None),
                Some((_, Some(text))) => Ok(Some((text, "objects.yaml", Some(&PLACE)))),
                Some((_, None)) => Err(Lookup::Unknown),
            }
        }

        fn chart_configs(&self) -> &[ChartConfig] {
            &self.configs
        }

        fn chart_sources(&self) -> &[ChartSource] {
            &self.sources
        }
    }

    /// A run of these files only.
    fn files(files: Vec<(&'static str, &'static str)>) -> Run {
        Run {
            files,
            ..Run::default()
        }
    }

    /// A ConfigMap value, a Secret value.
    fn plain(text: &str) -> Option<DataText> {
        Some(DataText::Plain(text.to_owned()))
    }

    fn secret(text: &str) -> Option<DataText> {
        Some(DataText::Secret(SecretText::new(text.to_owned())))
    }

    /// A Flux HelmRelease in namespace `ns` with these references and `spec.values`.
    fn helm_release(values_from: Value, values: Value) -> Value {
        json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "occm", "namespace": "ns"},
            "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager"}},
                "valuesFrom": values_from, "values": values}})
    }

    /// The merged values of a resolved HelmRelease.
    fn flux_values(run: &Run, release: &Value) -> Value {
        let resolved = resolve(release, run).expect("a HelmRelease with references");
        assert!(resolved.sources.is_some(), "every reference resolves");
        resolved.object["spec"]["values"].clone()
    }

    #[test]
    fn flux_merges_values_from_in_list_order() {
        let run = Run {
            objects: vec![
                (
                    "ConfigMap",
                    Some("ns"),
                    "first",
                    vec![("values.yaml", plain("a: first\nb: first\n"))],
                ),
                (
                    "Secret",
                    Some("ns"),
                    "second",
                    vec![("v", secret("a: second\nc: {d: second}\n"))],
                ),
            ],
            ..Run::default()
        };
        let release = helm_release(
            json!([{"kind": "ConfigMap", "name": "first"},
                {"kind": "Secret", "name": "second", "valuesKey": "v"}]),
            Value::Null,
        );
        assert_eq!(
            flux_values(&run, &release),
            json!({"a": "second", "b": "first", "c": {"d": "second"}})
        );
        let resolved = resolve(&release, &run).expect("resolved");
        assert_eq!(
            resolved.sources,
            Some(vec![
                "ConfigMap first key values.yaml, from objects.yaml".to_owned(),
                "Secret second key v, from objects.yaml".to_owned(),
            ])
        );
        // The other way round, the other wins.
        let reversed = helm_release(
            json!([{"kind": "Secret", "name": "second", "valuesKey": "v"},
                {"kind": "ConfigMap", "name": "first"}]),
            Value::Null,
        );
        assert_eq!(flux_values(&run, &reversed)["a"], "first");
    }

    #[test]
    fn flux_spec_values_win_over_values_from() {
        let run = Run {
            objects: vec![(
                "ConfigMap",
                Some("ns"),
                "base",
                vec![("values.yaml", plain("a: {b: from, c: from}\n"))],
            )],
            ..Run::default()
        };
        let release = helm_release(
            json!([{"kind": "ConfigMap", "name": "base"}]),
            json!({"a": {"b": "own"}}),
        );
        assert_eq!(
            flux_values(&run, &release),
            json!({"a": {"b": "own", "c": "from"}})
        );
        let resolved = resolve(&release, &run).expect("resolved");
        let path = ["a".to_owned(), "b".to_owned()];
        assert!(matches!(
            resolved.place_of(&path),
            Some(Place::Own(Some(_)))
        ));
        assert_eq!(
            resolved.place_of(&["a".to_owned(), "c".to_owned()]),
            Some(Place::Input {
                input: String::new(),
                line: 7,
                what: "ConfigMap base key values.yaml".to_owned(),
            })
        );
    }

    #[test]
    fn flux_target_path_sets_one_value_at_its_path() {
        let run = Run {
            objects: vec![(
                "Secret",
                Some("ns"),
                "flag",
                vec![("serial", secret("false")), ("quoted", secret("'false'"))],
            )],
            ..Run::default()
        };
        let release = helm_release(
            json!([{"kind": "Secret", "name": "flag", "valuesKey": "serial",
                    "targetPath": "cloudConfig.loadBalancer.provider-requires-serial-api-calls"},
                {"kind": "Secret", "name": "flag", "valuesKey": "quoted", "targetPath": "x"}]),
            json!({"cloudConfig": {"global": {"region": "r"}}}),
        );
        assert_eq!(
            flux_values(&run, &release),
            json!({"cloudConfig": {"global": {"region": "r"},
                "loadBalancer": {"provider-requires-serial-api-calls": false}}, "x": "false"})
        );
        // spec.values still wins over a target path.
        let over = helm_release(
            json!([{"kind": "Secret", "name": "flag", "valuesKey": "serial", "targetPath": "x"}]),
            json!({"x": true}),
        );
        assert_eq!(flux_values(&run, &over), json!({"x": true}));
    }

    #[test]
    fn flux_skips_an_optional_missing_reference_and_keeps_a_required_one() {
        let run = Run {
            objects: vec![
                (
                    "ConfigMap",
                    Some("ns"),
                    "base",
                    vec![("values.yaml", plain("a: 1\n"))],
                ),
                ("Secret", Some("ns"), "broken", vec![("values.yaml", None)]),
            ],
            ..Run::default()
        };
        let base = json!({"kind": "ConfigMap", "name": "base"});
        let missing =
            |optional: bool| json!({"kind": "Secret", "name": "gone", "optional": optional});
        let no_key =
            json!({"kind": "ConfigMap", "name": "base", "valuesKey": "nope", "optional": true});
        // Optional and absent (object or key): skipped, the rest merged.
        let release = helm_release(json!([missing(true), base.clone(), no_key]), Value::Null);
        assert_eq!(flux_values(&run, &release), json!({"a": 1}));
        // Required and absent: the values cannot be seen; only that reference stays.
        let release = helm_release(json!([base.clone(), missing(false)]), Value::Null);
        let resolved = resolve(&release, &run).expect("a HelmRelease");
        assert_eq!(resolved.sources, None);
        assert!(resolved.layers.is_empty());
        assert_eq!(
            resolved.object["spec"]["valuesFrom"],
            json!([missing(false)])
        );
        // Optional but unreadable: not skipped (the inputs cannot tell it is absent).
        let unreadable = json!({"kind": "Secret", "name": "broken", "optional": true});
        let release = helm_release(json!([base, unreadable.clone()]), Value::Null);
        let resolved = resolve(&release, &run).expect("a HelmRelease");
        assert_eq!(resolved.object["spec"]["valuesFrom"], json!([unreadable]));
    }

    /// A HelmChart in `kube-system` with `valuesContent` and `valuesSecrets`.
    fn cattle_chart(values_content: &str, secrets: Value) -> Value {
        json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": "openstack-cloud-controller-manager",
                "valuesContent": values_content, "valuesSecrets": secrets}})
    }

    /// The merged values of a resolved HelmChart (its `spec.valuesContent`).
    fn cattle_values(run: &Run, chart: &Value) -> Value {
        let resolved = resolve(chart, run).expect("a HelmChart with more values");
        assert!(resolved.sources.is_some(), "every source resolves");
        let text = resolved.object["spec"]["valuesContent"]
            .as_str()
            .expect("text");
        yaml::parse_one(text)
            .and_then(|n| n.to_json())
            .expect("YAML")
    }

    fn secrets_run() -> Run {
        Run {
            objects: vec![
                (
                    "Secret",
                    Some("kube-system"),
                    "s1",
                    vec![
                        ("k1", secret("a: s1\nb: s1\nc: s1k1\n")),
                        ("k2", secret("c: s1k2\n")),
                    ],
                ),
                (
                    "Secret",
                    Some("kube-system"),
                    "s2",
                    vec![("k", secret("b: s2\n"))],
                ),
            ],
            ..Run::default()
        }
    }

    #[test]
    fn helm_controller_mounts_values_content_then_each_values_secret_in_order() {
        let run = secrets_run();
        let chart = cattle_chart(
            "a: content\nd: content\n",
            json!([{"name": "s1", "keys": ["k1", "k2"]}, {"name": "s2", "keys": ["k"]}]),
        );
        assert_eq!(
            cattle_values(&run, &chart),
            json!({"a": "s1", "b": "s2", "c": "s1k2", "d": "content"})
        );
        // Secrets the other way round: the other wins; keys the other way round too.
        let chart = cattle_chart(
            "a: content\n",
            json!([{"name": "s2", "keys": ["k"]}, {"name": "s1", "keys": ["k2", "k1"]}]),
        );
        assert_eq!(
            cattle_values(&run, &chart),
            json!({"a": "s1", "b": "s1", "c": "s1k1"})
        );
        // An optional entry's missing key is skipped; a required one's is not.
        let optional = cattle_chart(
            "a: content\n",
            json!([{"name": "s2", "keys": ["k", "gone"], "ignoreUpdates": true}]),
        );
        assert_eq!(
            cattle_values(&run, &optional),
            json!({"a": "content", "b": "s2"})
        );
        let required = cattle_chart("a: content\n", json!([{"name": "s2", "keys": ["gone"]}]));
        assert_eq!(resolve(&required, &run), None);
    }

    const CHART_CONFIG: &str = "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\n\
        metadata: {name: occm, namespace: kube-system}\nspec:\n  valuesContent: |\n    \
        a: config\n    b: config\n  valuesSecrets: [{name: s2, keys: [k]}]\n";

    #[test]
    fn helm_controller_mounts_the_chart_config_after_the_chart() {
        let config = yaml::parse_one(CHART_CONFIG).expect("YAML");
        let run = Run {
            configs: vec![ChartConfig::read(&config, CHART_CONFIG, "config.yaml").expect("one")],
            ..secrets_run()
        };
        // The HelmChart's own valuesSecrets come before the HelmChartConfig's valuesContent,
        // which comes before the HelmChartConfig's valuesSecrets.
        let chart = cattle_chart(
            "a: chart\nc: chart\nd: chart\n",
            json!([{"name": "s1", "keys": ["k2"]}]),
        );
        assert_eq!(
            cattle_values(&run, &chart),
            json!({"a": "config", "b": "s2", "c": "s1k2", "d": "chart"})
        );
        let resolved = resolve(&chart, &run).expect("resolved");
        assert_eq!(resolved.merge, Merge::HelmChartConfig);
        assert_eq!(
            resolved
                .sources
                .as_ref()
                .and_then(|s| s.first())
                .map(String::as_str),
            Some("the HelmChart's spec.valuesContent")
        );
        let labels: Vec<&str> = resolved.layers.iter().map(|l| l.what.as_str()).collect();
        assert_eq!(
            labels,
            [
                "spec.valuesContent",
                "Secret s1 key k2 (HelmChart kube-system/occm spec.valuesSecrets)",
                "HelmChartConfig kube-system/occm spec.valuesContent",
                "Secret s2 key k (HelmChartConfig kube-system/occm spec.valuesSecrets)",
            ]
        );
        assert_eq!(
            config_merged_into(&config.to_json().expect("json"), &[chart], &run).as_deref(),
            Some("kube-system/occm")
        );
    }

    #[test]
    fn argo_value_files_resolve_by_source_path_and_ref_in_order() {
        let inputs = files(vec![
            (
                "repo/occm/values.yaml",
                "cloudConfig: {global: {region: A}}\n",
            ),
            ("repo/occm/empty.yaml", ""),
            ("repo/occm/list.yaml", "- 1\n"),
            (
                "config/prod/values.yaml",
                "cloudConfig: {global: {region: B}}\n",
            ),
        ]);
        let app = json!({"spec": {
            "source": {"path": "occm/./chart/..", "helm": {"valueFiles": [
                "values.yaml", "empty.yaml", "list.yaml", "missing.yaml", "https://x/v.yaml"]}},
            "sources": [
                {"chart": "c", "helm": {"valueFiles": ["$values/prod/values.yaml"]}},
                {"ref": "values", "repoURL": "https://example.org/config"},
            ],
        }});
        let sources = argo_value_files(&app, &inputs);
        let shape: Vec<(&str, Vec<FileShape<'_>>)> = sources
            .iter()
            .map(|s| {
                let files = s
                    .files
                    .iter()
                    .map(|f| (f.file, f.found.as_ref().map(|x| x.name)));
                (s.pointer.as_str(), files.collect())
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (
                    "/spec/source",
                    vec![
                        ("values.yaml", Some("repo/occm/values.yaml")),
                        ("empty.yaml", Some("repo/occm/empty.yaml")),
                        // Not a map: not values Helm merges.
                        ("list.yaml", None),
                        ("missing.yaml", None),
                        ("https://x/v.yaml", None),
                    ]
                ),
                (
                    "/spec/sources/0",
                    vec![("$values/prod/values.yaml", Some("config/prod/values.yaml"))]
                ),
            ]
        );
        let found = |source: usize, file: usize| {
            sources[source].files[file]
                .found
                .as_ref()
                .map(|f| f.values.clone())
        };
        assert_eq!(
            found(0, 0),
            Some(json!({"cloudConfig": {"global": {"region": "A"}}}))
        );
        assert_eq!(found(0, 1), Some(json!({})));
        assert_eq!(
            found(1, 0),
            Some(json!({"cloudConfig": {"global": {"region": "B"}}}))
        );
    }

    #[test]
    fn argo_values_over_files_prefer_the_object_to_the_string() {
        let helm = |v: Value| v.as_object().cloned().unwrap_or_default();
        assert_eq!(
            argo_values_over_files(&helm(json!({"valuesObject": {"a": 1}, "values": "a: 2"}))),
            Some(json!({"a": 1}))
        );
        assert_eq!(
            argo_values_over_files(&helm(json!({"valuesObject": null, "values": "a: 2"}))),
            Some(json!({"a": 2}))
        );
        assert_eq!(argo_values_over_files(&helm(json!({}))), Some(Value::Null));
        assert_eq!(
            argo_values_over_files(&helm(json!({"values": "a: [1"}))),
            None
        );
    }

    #[test]
    fn suffixes_stay_inside_the_repository() {
        let source = json!({"path": "apps/occm"});
        let suffix = |file| value_file_suffix(&source, file);
        assert_eq!(suffix("../../../values.yaml"), None);
        assert_eq!(
            suffix("../../values.yaml"),
            Some(PathBuf::from("values.yaml"))
        );
        assert_eq!(
            suffix("../shared/v.yaml"),
            Some(PathBuf::from("apps/shared/v.yaml"))
        );
        assert_eq!(suffix("$ref"), None);
        assert_eq!(value_file_suffix(&json!({}), "values.yaml"), None);
    }

    #[test]
    fn a_secret_image_tag_is_hidden_only_when_a_secret_sets_it_last() {
        let tag = |t: &str| json!({"image": {"tag": t}});
        let marker = "<from Secret ns/v, not shown>";
        for (origins, want) in [
            // A Secret sets it: the release stays, the rest is the marker.
            (
                vec![(tag("v1.31.0-x"), Some("ns/v"))],
                format!("v1.31.0 {marker}"),
            ),
            (vec![(tag("v1.31"), Some("ns/v"))], marker.to_owned()),
            (vec![(tag("latest"), Some("ns/v"))], marker.to_owned()),
            // A later layer without a Secret wins: shown as written.
            (
                vec![(tag("v1.31.0-x"), Some("ns/v")), (tag("v1.32.1"), None)],
                "v1.32.1".to_owned(),
            ),
            // A later Secret layer that does not set the tag changes nothing.
            (
                vec![(tag("v1.32.1"), None), (json!({"a": 1}), Some("ns/v"))],
                "v1.32.1".to_owned(),
            ),
        ] {
            let origins: Vec<(Value, Option<String>)> = origins
                .into_iter()
                .map(|(v, s)| (v, s.map(str::to_owned)))
                .collect();
            let mut merged = Value::Object(Map::new());
            for (values, _) in &origins {
                merge_maps(&mut merged, values.clone());
            }
            hide_secret_image_tag(&mut merged, &origins);
            assert_eq!(merged["image"]["tag"], want, "{origins:?}");
        }
        // A numeric tag from a Secret is hidden too.
        let origins = vec![(json!({"image": {"tag": 131}}), Some("s".to_owned()))];
        let mut merged = json!({"image": {"tag": 131}});
        hide_secret_image_tag(&mut merged, &origins);
        assert_eq!(merged["image"]["tag"], "<from Secret s, not shown>");
    }

    #[test]
    fn release_prefixes() {
        assert_eq!(release_prefix(" v1.31.10-rc.1 "), Some("v1.31.10"));
        assert_eq!(release_prefix("v1.31.0"), Some("v1.31.0"));
        for tag in [
            "v1.31", "v1..0", "v1.31.", "1.31.0", "v2.31.0", "v1.x.0", "",
        ] {
            assert_eq!(release_prefix(tag), None, "{tag}");
        }
    }

    #[test]
    fn target_paths_are_set_as_flux_sets_them() {
        let mut values = json!({"cloudConfig": {"global": {"region": "r"}}});
        // Helm's --set syntax: list indexes, escaped dots; quotes make a string.
        assert!(set_at_path(
            &mut values,
            "extraEnv[1].name",
            "x",
            &mut SetBudget::default()
        ));
        assert!(set_at_path(
            &mut values,
            "cloudConfig.loadBalancer.a\\.b",
            "'true'",
            &mut SetBudget::default()
        ));
        assert!(set_at_path(
            &mut values,
            "cloudConfig.loadBalancer.provider-requires-serial-api-calls",
            "true",
            &mut SetBudget::default()
        ));
        assert_eq!(
            values,
            json!({"cloudConfig": {"global": {"region": "r"}, "loadBalancer": {"a.b": "true",
                "provider-requires-serial-api-calls": true}},
                "extraEnv": [null, {"name": "x"}]})
        );
        // A path Helm cannot read, or one through a string: not applied, nothing changed.
        let before = values.clone();
        assert!(!set_at_path(
            &mut values,
            "a[x]",
            "1",
            &mut SetBudget::default()
        ));
        assert!(!set_at_path(
            &mut values,
            "cloudConfig.global.region.x",
            "1",
            &mut SetBudget::default()
        ));
        assert_eq!(values, before);
    }

    #[test]
    fn kustomize_values_inline_wins_over_the_values_file() {
        let file = "cloudConfig: {global: {region: file}, loadBalancer: {subnet-id: file}}\n";
        let file_at = |path: &Path| {
            (path == Path::new("app/../base/occm.yaml")).then_some(("base/occm.yaml", file))
        };
        let kustomization = |extra: Value| {
            let mut entry = json!({"name": "openstack-cloud-controller-manager",
                "valuesFile": "../base/occm.yaml",
                "valuesInline": {"cloudConfig": {"global": {"region": "inline"}}}});
            if let (Some(e), Some(x)) = (entry.as_object_mut(), extra.as_object()) {
                e.extend(x.clone());
            }
            json!({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "helmCharts": [entry, {"name": "other", "valuesFile": "../base/occm.yaml"}]})
        };
        let object = kustomization(json!({}));
        let (key, resolved) =
            kustomize_values_files(&object, "app/kustomization.yaml", Path::new("app"), file_at)
                .expect("resolved");
        assert_eq!(key, object);
        assert_eq!(
            resolved.object["helmCharts"][0],
            json!({"name": "openstack-cloud-controller-manager", "valuesInline":
                {"cloudConfig": {"global": {"region": "inline"},
                    "loadBalancer": {"subnet-id": "file"}}}})
        );
        // Another chart's entry is left as written.
        assert_eq!(
            resolved.object["helmCharts"][1]["valuesFile"],
            "../base/occm.yaml"
        );
        assert_eq!(
            resolved.sources,
            Some(vec![
                "values file ../base/occm.yaml of the kustomization, from base/occm.yaml"
                    .to_owned()
            ])
        );
        // What kustomize merges otherwise stays named as unseen.
        for extra in [
            json!({"valuesMerge": "merge"}),
            json!({"additionalValuesFiles": ["more.yaml"]}),
        ] {
            let object = kustomization(extra);
            let found = kustomize_values_files(
                &object,
                "app/kustomization.yaml",
                Path::new("app"),
                file_at,
            );
            assert_eq!(found, None, "{object}");
        }
    }

    #[test]
    fn own_values_only_drops_what_is_named_but_not_held() {
        let release = helm_release(json!([{"kind": "ConfigMap", "name": "c"}]), json!({"a": 1}));
        let own = own_values_only(&release);
        assert_eq!(own["spec"].get("valuesFrom"), None);
        assert_eq!(own["spec"]["values"], json!({"a": 1}));
        let app = json!({"spec": {
            "source": {"helm": {"valueFiles": ["v.yaml"], "values": "a: 1"}},
            "sources": [{"helm": {"valueFiles": ["$r/v.yaml"], "valuesObject": {"b": 2}}},
                {"ref": "r"}]}});
        assert_eq!(
            own_values_only(&app),
            json!({"spec": {"source": {"helm": {"values": "a: 1"}},
                "sources": [{"helm": {"valuesObject": {"b": 2}}}, {"ref": "r"}]}})
        );
        assert_eq!(
            Merge::HelmChartConfig.merged_text_field(),
            Some(vec![Seg::key("spec"), Seg::key("valuesContent")])
        );
        assert_eq!(Merge::FluxOrArgo.merged_text_field(), None);
    }

    #[test]
    fn empty_values_texts_add_nothing_and_block_nothing() {
        // An empty ConfigMap values text, HelmChart valuesContent and Secret key: each read as
        // no values (Helm's empty values file), never as values that cannot be seen.
        let run = Run {
            objects: vec![
                (
                    "ConfigMap",
                    Some("ns"),
                    "empty",
                    vec![("values.yaml", plain(""))],
                ),
                (
                    "ConfigMap",
                    Some("ns"),
                    "base",
                    vec![("values.yaml", plain("a: 1\n"))],
                ),
                (
                    "Secret",
                    Some("kube-system"),
                    "s",
                    vec![("empty", secret("")), ("v", secret("b: 2\n"))],
                ),
            ],
            ..Run::default()
        };
        let release = helm_release(
            json!([{"kind": "ConfigMap", "name": "empty"}, {"kind": "ConfigMap", "name": "base"}]),
            Value::Null,
        );
        assert_eq!(flux_values(&run, &release), json!({"a": 1}));
        let chart = cattle_chart("", json!([{"name": "s", "keys": ["empty", "v"]}]));
        assert_eq!(cattle_values(&run, &chart), json!({"b": 2}));
    }

    #[test]
    fn a_chart_config_of_another_namespace_is_not_the_charts() {
        let config = |text: &'static str| {
            let root = yaml::parse_one(text).expect("YAML");
            ChartConfig::read(&root, text, "config.yaml").expect("a HelmChartConfig")
        };
        const OTHER: &str = "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\n\
            metadata: {name: occm, namespace: other}\nspec: {valuesContent: 'a: other'}\n";
        const LOOSE: &str = "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\n\
            metadata: {name: occm}\nspec: {valuesContent: 'a: loose'}\n";
        let chart = cattle_chart("a: chart\n", Value::Null);
        // The one of the HelmChart's namespace, though another namespace has one too.
        let run = Run {
            configs: vec![config(OTHER), config(CHART_CONFIG)],
            ..secrets_run()
        };
        assert_eq!(cattle_values(&run, &chart)["a"], "config");
        // Only another namespace's: nothing to merge.
        let run = Run {
            configs: vec![config(OTHER)],
            ..Run::default()
        };
        assert_eq!(resolve(&chart, &run), None);
        // One whose namespace is left to the deployment: the HelmChart's.
        let run = Run {
            configs: vec![config(LOOSE)],
            ..Run::default()
        };
        assert_eq!(cattle_values(&run, &chart), json!({"a": "loose"}));
    }

    #[test]
    fn the_secrets_a_chart_and_its_config_read_are_named_in_mount_order() {
        let root = yaml::parse_one(CHART_CONFIG).expect("YAML");
        let run = Run {
            configs: vec![ChartConfig::read(&root, CHART_CONFIG, "config.yaml").expect("one")],
            ..Run::default()
        };
        let chart = cattle_chart("", json!([{"name": "s1", "keys": ["k2", "k1"]}]));
        let ns = Some("kube-system".to_owned());
        let read = |name: &str, key: &str| (ns.clone(), name.to_owned(), key.to_owned());
        assert_eq!(
            values_secrets_read(&chart, &run),
            vec![read("s1", "k2"), read("s1", "k1"), read("s2", "k")]
        );
        assert_eq!(
            values_secrets_read(&json!({"kind": "HelmRelease"}), &run),
            vec![]
        );
    }

    #[test]
    fn merged_chart_values_are_bounded_like_any_values_text() {
        // The merged text is pretty JSON: `{\n  "a": "…"\n}`, 13 bytes around the value.
        let at = |len: usize| {
            let text = format!("a: {}\n", "x".repeat(len));
            let run = Run {
                objects: vec![(
                    "Secret",
                    Some("kube-system"),
                    "s1",
                    vec![("k1", secret(&text))],
                )],
                ..Run::default()
            };
            let chart = cattle_chart("", json!([{"name": "s1", "keys": ["k1"]}]));
            resolve(&chart, &run)
        };
        let limit = MAX_VALUES_TEXT_BYTES - 13;
        assert!(at(limit).is_some());
        assert_eq!(at(limit + 1), None);
        assert_eq!(at(2 * limit), None);
    }

    #[test]
    fn only_argo_applications_and_flux_releases_are_resolved_as_theirs() {
        let run = files(vec![("repo/occm/values.yaml", "a: 1\n")]);
        let source = json!({"path": "occm", "helm": {"valueFiles": ["values.yaml"]}});
        let app = |api: &str, kind: &str| {
            json!({"apiVersion": api, "kind": kind, "metadata": {"name": "a"},
                "spec": {"source": source.clone()}})
        };
        let resolved = resolve(&app("argoproj.io/v1alpha1", "Application"), &run);
        assert_eq!(
            resolved.map(|r| r.object["spec"]["source"]["helm"].clone()),
            Some(json!({"valuesObject": {"a": 1}}))
        );
        // Another group's Application, another Argo CD kind: not Argo CD's value files.
        assert_eq!(
            resolve(&app("app.k8s.io/v1beta1", "Application"), &run),
            None
        );
        assert_eq!(
            resolve(&app("argoproj.io/v1alpha1", "AppProject"), &run),
            None
        );
        // A HelmRelease only of Flux's group; Flux's group only for a HelmRelease.
        let run = Run {
            objects: vec![(
                "ConfigMap",
                Some("ns"),
                "c",
                vec![("values.yaml", plain("a: 1\n"))],
            )],
            ..Run::default()
        };
        let mut release = helm_release(json!([{"kind": "ConfigMap", "name": "c"}]), Value::Null);
        assert!(resolve(&release, &run).is_some());
        release["kind"] = json!("Kustomization");
        assert_eq!(resolve(&release, &run), None);
        release["kind"] = json!("HelmRelease");
        release["apiVersion"] = json!("example.org/v1");
        assert_eq!(resolve(&release, &run), None);
    }

    #[test]
    fn a_chart_ref_is_read_as_the_one_chart_source_it_names() {
        let source = |kind: &str, namespace: Option<&str>, name: &str, version: &str| {
            let mut json = match kind {
                "OCIRepository" => json!({"apiVersion": "source.toolkit.fluxcd.io/v1beta2",
                    "kind": kind, "metadata": {"name": name},
                    "spec": {"url": "oci://r.example/charts/openstack-cloud-controller-manager",
                        "ref": {"tag": version}}}),
                _ => json!({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": kind,
                    "metadata": {"name": name},
                    "spec": {"chart": "openstack-cloud-controller-manager", "version": version}}),
            };
            if let Some(ns) = namespace {
                json["metadata"]["namespace"] = json!(ns);
            }
            ChartSource::of(&json).expect("a chart source")
        };
        let release = |reference: Value| {
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "occm", "namespace": "ns"},
                "spec": {"chartRef": reference}})
        };
        let chart_of = |run: &Run, reference: Value| {
            with_chart_ref(&release(reference), run).map(|r| r["spec"]["chart"].clone())
        };
        let oci = json!({"kind": "OCIRepository", "name": "occm"});
        let pinned = |v: &str| json!({"spec": {"chart": "openstack-cloud-controller-manager", "version": v}});
        // The source of the release's namespace, though another namespace's has that name.
        let run = Run {
            sources: vec![
                source("OCIRepository", Some("other"), "occm", "1.0.0"),
                source("OCIRepository", Some("ns"), "occm", "2.31.1"),
                source("HelmChart", Some("ns"), "occm", "1.3.0"),
                source("OCIRepository", Some("ns"), "else", "1.3.0"),
            ],
            ..Run::default()
        };
        assert_eq!(chart_of(&run, oci.clone()), Some(pinned("2.31.1")));
        let source_chart = json!({"kind": "HelmChart", "name": "occm"});
        assert_eq!(chart_of(&run, source_chart), Some(pinned("1.3.0")));
        let elsewhere = json!({"kind": "OCIRepository", "name": "occm", "namespace": "other"});
        assert_eq!(chart_of(&run, elsewhere), Some(pinned("1.0.0")));
        // Only another namespace's: not the one named.
        let run = Run {
            sources: vec![source("OCIRepository", Some("other"), "occm", "1.0.0")],
            ..Run::default()
        };
        assert_eq!(chart_of(&run, oci.clone()), None);
        // One whose namespace is left to the deployment.
        let run = Run {
            sources: vec![source("OCIRepository", None, "occm", "2.28.0")],
            ..Run::default()
        };
        assert_eq!(chart_of(&run, oci.clone()), Some(pinned("2.28.0")));
        // Two such that disagree on the version, or on the chart: which one cannot be told.
        let mut other_chart = source("OCIRepository", None, "occm", "2.28.0");
        other_chart.chart = "tempo".to_owned();
        for second in [source("OCIRepository", None, "occm", "2.29.0"), other_chart] {
            let run = Run {
                sources: vec![source("OCIRepository", None, "occm", "2.28.0"), second],
                ..Run::default()
            };
            assert_eq!(chart_of(&run, oci.clone()), None);
        }
        // Two that agree: that chart.
        let run = Run {
            sources: vec![
                source("OCIRepository", None, "occm", "2.28.0"),
                source("OCIRepository", None, "occm", "2.28.0"),
            ],
            ..Run::default()
        };
        assert_eq!(chart_of(&run, oci.clone()), Some(pinned("2.28.0")));
        // A release that names its chart itself keeps it.
        let mut named = release(oci);
        named["spec"]["chart"] = json!({"spec": {"chart": "x"}});
        assert_eq!(with_chart_ref(&named, &run), None);
    }

    #[test]
    fn an_empty_kustomize_values_file_is_no_values() {
        let file_at = |path: &Path| (path == Path::new("app/v.yaml")).then_some(("app/v.yaml", ""));
        let object = json!({"apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization", "helmCharts": [
                {"name": "openstack-cloud-controller-manager", "valuesFile": "v.yaml"}]});
        let (_, resolved) =
            kustomize_values_files(&object, "app/kustomization.yaml", Path::new("app"), file_at)
                .expect("resolved");
        assert_eq!(
            resolved.object["helmCharts"][0],
            json!({"name": "openstack-cloud-controller-manager", "valuesInline": {}})
        );
    }

    #[test]
    fn a_chart_config_with_empty_values_content_or_null_values_merges_the_rest() {
        // helm-controller mounts an empty `valuesContent` or a null `values` as no values:
        // the HelmChartConfig's other field is still merged over the HelmChart's values,
        // never read as values that cannot be known (which would evaluate the HelmChart alone).
        for text in [
            "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\n\
             metadata: {name: occm, namespace: kube-system}\n\
             spec: {valuesContent: '', values: {a: config}}\n",
            "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\n\
             metadata: {name: occm, namespace: kube-system}\n\
             spec: {valuesContent: 'a: config', values: null}\n",
        ] {
            let root = yaml::parse_one(text).expect("YAML");
            let run = Run {
                configs: vec![ChartConfig::read(&root, text, "config.yaml").expect("one")],
                ..Run::default()
            };
            let chart = cattle_chart("a: chart\nb: chart\n", Value::Null);
            assert_eq!(
                cattle_values(&run, &chart),
                json!({"a": "config", "b": "chart"}),
                "{text}"
            );
        }
    }

    #[test]
    fn a_target_path_value_quoted_on_one_side_only_is_typed_as_written() {
        // Flux trims the quotes only of a value that starts and ends with the same quote.
        for text in ["'false", "false'", "\"false", "'false\""] {
            let mut values = json!({});
            assert!(set_at_path(
                &mut values,
                "x",
                text,
                &mut SetBudget::default()
            ));
            assert_eq!(values, json!({"x": text}), "{text}");
        }
    }
}
