//! The values a Flux HelmRelease takes from other objects (`spec.valuesFrom`), resolved from
//! the objects of the same `check` run.
//!
//! A pre-pass over every input of a run ([`ValuesIndex::build`]) records the ConfigMaps and
//! Secrets it holds (files, the standard-input stream, the items of `List`s) and the ones the
//! `secretGenerator` / `configMapGenerator` entries of a kustomize `kustomization.yaml`
//! generate (`files:` as `key=path` or `path`, read from the run's inputs relative to the
//! kustomization's directory; `literals:` as `key=value`). The index is pure data: building
//! it reads nothing but the texts already read, and [`ValuesIndex::resolve`] only consults it.
//!
//! Resolution follows Flux's helm-controller (`chartutil.ChartValuesFromReferences`): each
//! reference in list order, its `valuesKey` (default `values.yaml`) parsed as YAML and merged
//! into the values (maps recursively, anything else replaced), or with `targetPath` set as one
//! value at that path (Helm `--set` syntax; a quoted value is a string, else typed); then
//! `spec.values` merged on top. A missing optional reference is skipped, as Flux does. A
//! reference this run cannot resolve stays in the object, so the engine reports it as values it
//! cannot see (the webhook's message) instead of assuming the chart's defaults.
//!
//! A RKE2/k3s HelmChart is merged with the one HelmChartConfig of its name and namespace in the
//! run, in helm-controller's order ([`ValuesIndex::resolve`] cites the source); the
//! HelmChartConfig is then reported through the HelmChart ([`ValuesIndex::config_merged_into`]).
//!
//! Argo CD Application value files are resolved in Argo CD's order by
//! [`crate::sites::resolve`], which looks in the run's files through this index ([`Inputs`]).
//!
//! Each merged source is a [`Layer`] that knows its input and where its lines are, so
//! [`Resolved::place_of`] tells which file and line set a merged value (the last source that
//! holds it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::input::{Content, Input};
use crate::secret_text::{self, SecretText};
use crate::sites::decode_base64_like_go;
use crate::sites::helm::{FLUX_DEFAULT_VALUES_KEY, describe_values_reference};
use crate::sites::resolve::{self, Inputs, value_file_suffix, value_files};
pub(super) use crate::sites::resolve::{argo_sources, normalize};
use crate::sites::strvals::SetBudget;
use crate::sites::umbrella::Dependency;
use crate::yaml::{self, Seg};

/// The ConfigMaps and Secrets of one run, by kind and name.
#[derive(Debug, Default)]
pub struct ValuesIndex {
    objects: Vec<DataObject>,
    /// Inputs that Argo CD Applications name as `helm.valueFiles`: (normalized path, input
    /// name, text).
    files: Vec<(PathBuf, String, String)>,
    /// The RKE2/k3s HelmChartConfigs of the run.
    chart_configs: Vec<ChartConfig>,
    /// The RKE2/k3s HelmCharts of the run (not in templates), for
    /// [`ValuesIndex::config_merged_into`].
    helm_charts: Vec<Value>,
    /// The Flux chart sources of the run a HelmRelease's `spec.chartRef` may name.
    chart_sources: Vec<ChartSource>,
    /// The run's kustomizations whose CCM `helmCharts[].valuesFile` is among the inputs: the
    /// object as `check` evaluates it, and with the file merged in.
    kustomizations: Vec<(Value, Resolved)>,
    /// The `valuesFrom` references of the run's HelmReleases whose references all resolve:
    /// their values are evaluated merged, naming each source ([`Self::read_by_a_release`]).
    read: Vec<ValuesReference>,
}

/// A ConfigMap or Secret data key a HelmRelease reads its values from.
#[derive(Debug)]
struct ValuesReference {
    kind: String,
    /// The HelmRelease's namespace.
    namespace: Option<String>,
    name: String,
    key: String,
}

/// A RKE2/k3s HelmChartConfig: it customises the HelmChart of its name and namespace.
#[derive(Debug)]
struct ChartConfig {
    namespace: Option<String>,
    name: String,
    /// Its values layers (`spec.valuesContent`, then `spec.values`), None when one cannot be
    /// read (not YAML, not a map): the HelmChart's merged values cannot be known.
    layers: Option<Vec<Layer>>,
    /// Its `spec.valuesSecrets` entries helm-controller mounts after those layers.
    secrets: Vec<ValuesSecret>,
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
    crate::sites::helm::helm_controller_secrets(list, &own)
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
struct ChartSource {
    kind: &'static str,
    namespace: Option<String>,
    name: String,
    chart: String,
    version: Option<String>,
}

impl ChartSource {
    /// The chart source `json` is, if it is one.
    fn of(json: &Value) -> Option<Self> {
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

/// One ConfigMap or Secret (found in an input, or generated by kustomize).
#[derive(Debug)]
struct DataObject {
    /// `ConfigMap` or `Secret`.
    kind: &'static str,
    namespace: Option<String>,
    name: String,
    /// Data key → its text (None when it cannot be read: not base64, not UTF-8, a generator
    /// file that is not among the run's inputs) and where it was read from.
    data: Vec<(String, Option<DataText>, String)>,
    /// Data key → where its lines are: the input and, for a value that is a whole input file
    /// (a generator's `files:`), nothing more; else the line where the object starts.
    places: HashMap<String, DataPlace>,
}

/// A data value found for a reference: its text, where it was read from (for messages) and
/// where its lines are.
type Found<'a> = (&'a DataText, &'a str, Option<&'a DataPlace>);

/// A data value: a Secret's is [`SecretText`], which cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DataText {
    /// A ConfigMap's value.
    Plain(String),
    /// A Secret's value (`data`, `stringData`, a `secretGenerator` file or literal).
    Secret(SecretText),
}

impl DataText {
    /// `text` as a value of a `kind` object.
    fn of(kind: &str, text: String) -> Self {
        if kind == "Secret" {
            DataText::Secret(SecretText::new(text))
        } else {
            DataText::Plain(text)
        }
    }

    /// The text, for the values parser (never for a message: a value that reaches one from a
    /// Secret is replaced by [`secret_text::not_shown`] first, see [`hide_secret_image_tag`]).
    fn for_parsing(&self) -> &str {
        match self {
            DataText::Plain(text) => text,
            DataText::Secret(text) => text.expose(),
        }
    }
}

/// Where a data value of the index is written.
#[derive(Debug, Clone)]
struct DataPlace {
    input: String,
    /// None when the value is the input's whole text; else the line the object starts at.
    line: Option<usize>,
}

/// The `valuesFrom` references of a Flux HelmRelease (none for other objects).
fn references_of(release: &Value) -> Vec<ValuesReference> {
    let namespace = release
        .pointer("/metadata/namespace")
        .and_then(Value::as_str);
    release
        .pointer("/spec/valuesFrom")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|reference| {
            let (kind, name, key) = reference_target(reference)?;
            Some(ValuesReference {
                kind: kind.to_owned(),
                namespace: namespace.map(str::to_owned),
                name: name.to_owned(),
                key: key.to_owned(),
            })
        })
        .collect()
}

/// The object kind, name and data key a `valuesFrom` reference reads (`valuesKey` defaults to
/// `values.yaml`); None when kind or name is missing.
fn reference_target(reference: &Value) -> Option<(&str, &str, &str)> {
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

/// The run's value files, as the Argo CD resolver looks in them ([`resolve::argo_value_files`]).
impl Inputs for ValuesIndex {
    fn file(&self, suffix: &Path) -> Option<(&str, &str)> {
        let mut matches = self.files.iter().filter(|(p, _, _)| p.ends_with(suffix));
        let (_, name, text) = matches.next()?;
        matches
            .next()
            .is_none()
            .then_some((name.as_str(), text.as_str()))
    }
}

impl ValuesIndex {
    /// Records the ConfigMaps and Secrets of `inputs` and those their kustomizations generate.
    /// Nothing is parsed when no input mentions `valuesFrom`.
    pub fn build(inputs: &[Input]) -> Self {
        let texts: Vec<(&Input, &str)> = inputs
            .iter()
            .filter_map(|i| match &i.content {
                Content::Text(t) => Some((i, t.as_str())),
                _ => None,
            })
            .collect();
        let mut index = ValuesIndex::default();
        index.add_value_files(&texts);
        index.add_chart_configs(&texts);
        index.add_chart_sources(&texts);
        index.add_kustomize_values(&texts);
        if !texts
            .iter()
            .any(|(_, t)| t.contains("valuesFrom") || t.contains("valuesSecrets"))
        {
            return index;
        }
        let by_path: HashMap<PathBuf, (&str, &str)> = texts
            .iter()
            .filter_map(|(i, t)| Some((normalize(i.path.as_deref()?), (i.name.as_str(), *t))))
            .collect();
        let mut releases = Vec::new();
        for (input, text) in &texts {
            if !(text.contains("ConfigMap")
                || text.contains("Secret")
                || text.contains("Generator"))
            {
                continue;
            }
            let Ok(docs) = yaml::parse_stream(text) else {
                continue;
            };
            for doc in docs {
                let Ok(json) = doc.root.to_json() else {
                    continue;
                };
                let origin = format!("{}:{}", input.name, doc.root.start.line);
                let at = (input.name.as_str(), doc.root.start.line);
                index.add_document(&json, input.path.as_deref(), &origin, at, &by_path);
                if json.get("kind").and_then(Value::as_str) == Some("HelmRelease") {
                    releases.push(json);
                }
            }
        }
        for release in &releases {
            if index.resolve(release).is_some_and(|r| r.sources.is_some()) {
                index.read.extend(references_of(release));
            }
        }
        // The Secrets a HelmChart (and its HelmChartConfig) reads through `valuesSecrets`,
        // when they are merged: reported through the HelmChart, as a release's are.
        let mut read = Vec::new();
        for chart in &index.helm_charts {
            if index.resolve(chart).is_none_or(|r| r.sources.is_none()) {
                continue;
            }
            let Some((namespace, name)) = helm_cattle_key(chart, "HelmChart") else {
                continue;
            };
            let configs = index.configs_for(namespace.as_deref(), &name);
            let secrets = values_secrets_of(chart)
                .into_iter()
                .chain(configs.iter().flat_map(|c| c.secrets.iter().cloned()));
            for secret in secrets {
                for key in secret.keys {
                    read.push(ValuesReference {
                        kind: "Secret".to_owned(),
                        namespace: namespace.clone(),
                        name: secret.name.clone(),
                        key,
                    });
                }
            }
        }
        index.read.extend(read);
        index
    }

    /// Resolves the `valuesFile` of the kustomizations' `helmCharts[]` entries that install
    /// the CCM chart, relative to the kustomization's directory, from the run's inputs: the
    /// file's values with `valuesInline` merged over them, as kustomize writes the one values
    /// file it hands to Helm (`valuesMerge: override`, the default; kubernetes-sigs/kustomize
    /// @ 12f9e6391464b3ad9dd3fe8182049dc1b1772990,
    /// `api/internal/builtins/HelmChartInflationGenerator.go` `replaceValuesInline`). Entries
    /// with `additionalValuesFiles` or `valuesMerge: merge` stay named as unseen.
    fn add_kustomize_values(&mut self, texts: &[(&Input, &str)]) {
        if !texts.iter().any(|(_, t)| t.contains("helmCharts")) {
            return;
        }
        let by_path: HashMap<PathBuf, (&str, &str)> = texts
            .iter()
            .filter_map(|(i, t)| Some((normalize(i.path.as_deref()?), (i.name.as_str(), *t))))
            .collect();
        let charts: Vec<String> = crate::sites::helm::DEFAULT_CHARTS
            .iter()
            .map(|c| (*c).to_owned())
            .collect();
        for (input, text) in texts.iter().filter(|(_, t)| t.contains("helmCharts")) {
            let Some(dir) = input.path.as_deref().and_then(Path::parent) else {
                continue;
            };
            let Ok(docs) = yaml::parse_stream(text) else {
                continue;
            };
            for doc in docs {
                let Ok(json) = doc.root.to_json() else {
                    continue;
                };
                let json =
                    crate::sites::delivery::synthetic_object(&json, &input.name).unwrap_or(json);
                if json.get("kind").and_then(Value::as_str) != Some("Kustomization") {
                    continue;
                }
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
                    if !crate::sites::chart::chart_matches(name, &charts)
                        || !matches!(merge, None | Some("override"))
                        || additional
                    {
                        continue;
                    }
                    let Some((shown, file_text)) = by_path.get(&normalize(&dir.join(&file))) else {
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
                if !sources.is_empty() {
                    let resolved = Resolved {
                        object: out,
                        sources: Some(sources),
                        layers: Vec::new(),
                        merge: Merge::FluxOrArgo,
                    };
                    self.kustomizations.push((json, resolved));
                }
            }
        }
    }

    /// Records the Flux chart sources (`OCIRepository`, source `HelmChart`) of the run, when
    /// some input holds a `chartRef`.
    fn add_chart_sources(&mut self, texts: &[(&Input, &str)]) {
        if !texts.iter().any(|(_, t)| t.contains("chartRef")) {
            return;
        }
        for (_, text) in texts
            .iter()
            .filter(|(_, t)| t.contains("source.toolkit.fluxcd.io"))
        {
            let Ok(docs) = yaml::parse_stream(text) else {
                continue;
            };
            for doc in docs {
                if let Some(source) = doc.root.to_json().ok().as_ref().and_then(ChartSource::of) {
                    self.chart_sources.push(source);
                }
            }
        }
    }

    /// `release` with its `spec.chartRef` replaced by the chart and version of the one chart
    /// source of the run it names (as `spec.chart.spec`, so the release is read as the chart
    /// it installs); None when it has no `chartRef`, or the run holds no such source or
    /// several that disagree.
    fn with_chart_ref(&self, release: &Value) -> Option<Value> {
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
        let named = || {
            self.chart_sources
                .iter()
                .filter(move |s| s.kind == kind && s.name == name)
        };
        let mut candidates: Vec<&ChartSource> = named()
            .filter(|s| s.namespace.is_some() && s.namespace.as_deref() == namespace)
            .collect();
        if candidates.is_empty() {
            candidates = named()
                .filter(|s| s.namespace.is_none() || namespace.is_none())
                .collect();
        }
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

    /// Whether a HelmRelease of the run reads its values from data key `key` of the `kind`
    /// object `namespace/name` (and every other reference of it resolves): then that release's
    /// merged evaluation reports what the values hold, naming this object as a source.
    pub fn read_by_a_release(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        key: &str,
    ) -> bool {
        self.read.iter().any(|r| {
            r.kind == kind
                && r.name == name
                && r.key == key
                && (r.namespace.as_deref() == namespace
                    || r.namespace.is_none()
                    || namespace.is_none())
        })
    }

    /// Keeps the inputs that Argo CD Applications of the run name in `helm.valueFiles`.
    fn add_value_files(&mut self, texts: &[(&Input, &str)]) {
        let mut suffixes: Vec<PathBuf> = Vec::new();
        for (_, text) in texts.iter().filter(|(_, t)| t.contains("valueFiles")) {
            let Ok(docs) = yaml::parse_stream(text) else {
                continue;
            };
            for doc in docs {
                let Ok(json) = doc.root.to_json() else {
                    continue;
                };
                for (_, source) in argo_sources(&json) {
                    suffixes
                        .extend(value_files(source).filter_map(|f| value_file_suffix(source, f)));
                }
            }
        }
        if suffixes.is_empty() {
            return;
        }
        for (input, text) in texts {
            let Some(path) = input.path.as_deref().map(normalize) else {
                continue;
            };
            if suffixes.iter().any(|s| path.ends_with(s)) {
                self.files
                    .push((path, input.name.clone(), (*text).to_owned()));
            }
        }
    }

    /// Records the RKE2/k3s HelmChartConfigs of the run and the names of its HelmCharts
    /// (only when some input holds a HelmChartConfig).
    fn add_chart_configs(&mut self, texts: &[(&Input, &str)]) {
        if !texts
            .iter()
            .any(|(_, t)| t.contains("HelmChartConfig") || t.contains("valuesSecrets"))
        {
            return;
        }
        for (input, text) in texts.iter().filter(|(_, t)| t.contains("helm.cattle.io")) {
            let Ok(docs) = yaml::parse_stream(text) else {
                continue;
            };
            for doc in docs {
                let Ok(json) = doc.root.to_json() else {
                    continue;
                };
                let Some(_) = helm_cattle_key(&json, "HelmChart") else {
                    if let Some((namespace, name)) = helm_cattle_key(&json, "HelmChartConfig") {
                        let line = doc.root.start.line;
                        let what = |field: &str| {
                            let ns = namespace
                                .as_deref()
                                .map(|n| format!("{n}/"))
                                .unwrap_or_default();
                            format!("HelmChartConfig {ns}{name} {field}")
                        };
                        let label = |w: &str| format!("{w}, from {}:{line}", input.name);
                        let layers = config_layers(&doc.root, text, &input.name, what, label);
                        self.chart_configs.push(ChartConfig {
                            namespace,
                            name,
                            layers,
                            secrets: values_secrets_of(&json),
                        });
                    }
                    continue;
                };
                // A HelmChart in a template is not checked, so its HelmChartConfig must be.
                if super::template::template_reason(input.path.as_deref(), text).is_none() {
                    self.helm_charts.push(json);
                }
            }
        }
    }

    /// The HelmChartConfigs that customise the HelmChart `name` in `namespace` (same name; same
    /// namespace, or one left to the deployment on either side).
    fn configs_for(&self, namespace: Option<&str>, name: &str) -> Vec<&ChartConfig> {
        let named = || self.chart_configs.iter().filter(move |c| c.name == name);
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
    pub fn config_merged_into(&self, object: &Value) -> Option<String> {
        let (namespace, name) = helm_cattle_key(object, "HelmChartConfig")?;
        self.helm_charts.iter().find_map(|chart| {
            let (ns, n) = helm_cattle_key(chart, "HelmChart")?;
            let configs = self.configs_for(ns.as_deref(), &n);
            let same = n == name && matches!(configs.as_slice(), [c] if c.namespace == namespace);
            // Resolved only with exactly one HelmChartConfig of the name: this one.
            self.resolve_chart_config(chart).filter(|_| same).map(|_| {
                match ns.as_deref().or(namespace.as_deref()) {
                    Some(ns) => format!("{ns}/{n}"),
                    None => n.clone(),
                }
            })
        })
    }

    /// A RKE2/k3s HelmChart with the values of the one HelmChartConfig of its name merged in
    /// helm-controller's order; None without such a HelmChartConfig in the run, or when the
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
    fn resolve_chart_config(&self, object: &Value) -> Option<Resolved> {
        let (namespace, name) = helm_cattle_key(object, "HelmChart")?;
        let configs = self.configs_for(namespace.as_deref(), &name);
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
        self.secret_layers(
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
            self.secret_layers(
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
        if text.len() > crate::sites::helm::MAX_VALUES_TEXT_BYTES {
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
    /// file. None when one cannot be resolved from the run (no such Secret; no such key unless
    /// the entry is optional, which helm-controller then skips; values that are not a map).
    fn secret_layers(
        &self,
        namespace: Option<&str>,
        secrets: &[ValuesSecret],
        owner: &str,
        layers: &mut Vec<Layer>,
        origins: &mut Vec<(Value, Option<String>)>,
    ) -> Option<()> {
        for secret in secrets {
            for key in &secret.keys {
                let (text, from, place) = match self.lookup("Secret", namespace, &secret.name, key)
                {
                    Ok(Some(found)) => found,
                    // helm-controller mounts an optional Secret's missing key as nothing. A
                    // Secret absent from the run may still be in the cluster (values kept out
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
                    Some(
                        namespace.map_or(secret.name.clone(), |ns| format!("{ns}/{}", secret.name)),
                    ),
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
    fn resolve_value_files(&self, object: &Value) -> Option<Resolved> {
        let mut out = object.clone();
        let mut any = false;
        let mut complete = true;
        let mut sources = Vec::new();
        let mut layers = Vec::new();
        for source in resolve::argo_value_files(object, self) {
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
                        let label =
                            format!("value file {file_name} of {shown}, from {}", found.name);
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
            let Some(top) = resolve::argo_values_over_files(helm) else {
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

    fn add_document(
        &mut self,
        json: &Value,
        path: Option<&Path>,
        origin: &str,
        at: (&str, usize),
        by_path: &HashMap<PathBuf, (&str, &str)>,
    ) {
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let api = text(json, "apiVersion").unwrap_or_default();
        let kind = text(json, "kind").unwrap_or_default();
        if kind.ends_with("List")
            && let Some(items) = json.get("items").and_then(Value::as_array)
        {
            for item in items {
                self.add_object(item, origin, at);
            }
            return;
        }
        if kind == "Kustomization" && api.starts_with("kustomize.config.k8s.io/") {
            self.add_generated(json, path, origin, at, by_path);
            return;
        }
        self.add_object(json, origin, at);
    }

    /// A core ConfigMap or Secret.
    fn add_object(&mut self, json: &Value, origin: &str, at: (&str, usize)) {
        let field = |k: &str| json.get(k).and_then(Value::as_str);
        let kind = match (field("apiVersion"), field("kind")) {
            (Some("v1"), Some("ConfigMap")) => "ConfigMap",
            (Some("v1"), Some("Secret")) => "Secret",
            _ => return,
        };
        let meta = |k: &str| {
            json.pointer(&format!("/metadata/{k}"))
                .and_then(Value::as_str)
        };
        let Some(name) = meta("name") else {
            return;
        };
        let mut data: Vec<(String, Option<DataText>, String)> = Vec::new();
        if let Some(map) = json.get("data").and_then(Value::as_object) {
            for (key, value) in map {
                let text = match (kind, value.as_str()) {
                    ("Secret", Some(s)) => decode_base64_like_go(s)
                        .ok()
                        .and_then(|b| String::from_utf8(b).ok()),
                    (_, Some(s)) => Some(s.to_owned()),
                    _ => None,
                };
                let text = text.map(|t| DataText::of(kind, t));
                data.push((key.clone(), text, origin.to_owned()));
            }
        }
        if kind == "Secret"
            && let Some(map) = json.get("stringData").and_then(Value::as_object)
        {
            // The apiserver writes `stringData` over `data`.
            for (key, value) in map {
                data.retain(|(k, _, _)| k != key);
                let text = value.as_str().map(|t| DataText::of(kind, t.to_owned()));
                data.push((key.clone(), text, origin.to_owned()));
            }
        }
        let place = DataPlace {
            input: at.0.to_owned(),
            line: Some(at.1),
        };
        let places = data
            .iter()
            .map(|(k, _, _)| (k.clone(), place.clone()))
            .collect();
        self.objects.push(DataObject {
            kind,
            namespace: meta("namespace").map(str::to_owned),
            name: name.to_owned(),
            data,
            places,
        });
    }

    /// The Secrets and ConfigMaps a kustomization's generators make.
    fn add_generated(
        &mut self,
        json: &Value,
        path: Option<&Path>,
        origin: &str,
        at: (&str, usize),
        by_path: &HashMap<PathBuf, (&str, &str)>,
    ) {
        let dir = path.and_then(Path::parent);
        let namespace = json.get("namespace").and_then(Value::as_str);
        for (field, kind) in [
            ("secretGenerator", "Secret"),
            ("configMapGenerator", "ConfigMap"),
        ] {
            let Some(list) = json.get(field).and_then(Value::as_array) else {
                continue;
            };
            for generator in list {
                let Some(name) = generator.get("name").and_then(Value::as_str) else {
                    continue;
                };
                let mut data = Vec::new();
                let mut places = HashMap::new();
                let strings = |k: &str| {
                    generator
                        .get(k)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                };
                for entry in strings("files") {
                    let (key, file) = match entry.split_once('=') {
                        Some((k, f)) => (k.trim().to_owned(), f.trim()),
                        None => {
                            let file = entry.trim();
                            let key = Path::new(file)
                                .file_name()
                                .map(|n| n.to_string_lossy().into_owned())
                                .unwrap_or_default();
                            (key, file)
                        }
                    };
                    let found = dir.and_then(|d| by_path.get(&normalize(&d.join(file))));
                    let (text, from) = match found {
                        Some((shown, text)) => {
                            let place = DataPlace {
                                input: (*shown).to_owned(),
                                line: None,
                            };
                            places.insert(key.clone(), place);
                            (
                                Some(DataText::of(kind, (*text).to_owned())),
                                (*shown).to_owned(),
                            )
                        }
                        None => (None, format!("{origin} {field} file {file}")),
                    };
                    data.push((key, text, from));
                }
                for entry in strings("literals") {
                    if let Some((key, value)) = entry.split_once('=') {
                        let value = unquote(value.trim());
                        let place = DataPlace {
                            input: at.0.to_owned(),
                            line: Some(at.1),
                        };
                        places.insert(key.trim().to_owned(), place);
                        let value = DataText::of(kind, value);
                        data.push((key.trim().to_owned(), Some(value), origin.to_owned()));
                    }
                }
                let namespace = generator
                    .get("namespace")
                    .and_then(Value::as_str)
                    .or(namespace);
                self.objects.push(DataObject {
                    kind,
                    namespace: namespace.map(str::to_owned),
                    name: name.to_owned(),
                    data,
                    places,
                });
            }
        }
    }

    /// The data value `key` of the `kind` object `name` a HelmRelease in `namespace` refers to:
    /// `Ok(Some(text, origin))`, `Ok(None)` when the object exists without the key, `Err(())`
    /// when this run cannot tell (no such object, several that disagree, an unreadable value).
    fn lookup(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        key: &str,
    ) -> Result<Option<Found<'_>>, Lookup> {
        let named = || {
            self.objects
                .iter()
                .filter(move |o| o.kind == kind && o.name == name)
        };
        // The object in the HelmRelease's namespace; else one whose namespace is left to the
        // deployment (kustomize's `namespace:`, `kubectl -n`), on either side.
        let mut candidates: Vec<&DataObject> = named()
            .filter(|o| o.namespace.is_some() && o.namespace.as_deref() == namespace)
            .collect();
        if candidates.is_empty() {
            candidates = named()
                .filter(|o| o.namespace.is_none() || namespace.is_none())
                .collect();
        }
        let values: Vec<Option<(&Option<DataText>, &str)>> = candidates
            .iter()
            .map(|o| {
                o.data
                    .iter()
                    .rfind(|(k, _, _)| k == key)
                    .map(|(_, t, from)| (t, from.as_str()))
            })
            .collect();
        let Some(first) = values.first() else {
            return Err(Lookup::Absent);
        };
        if values.iter().any(|v| v.map(|x| x.0) != first.map(|x| x.0)) {
            return Err(Lookup::Unknown);
        }
        match first {
            None => Ok(None),
            Some((Some(text), from)) => Ok(Some((
                text,
                from,
                candidates.first().and_then(|o| o.places.get(key)),
            ))),
            Some((None, _)) => Err(Lookup::Unknown),
        }
    }

    /// `object` with its `spec.valuesFrom` resolved, when it is a Flux HelmRelease with
    /// references, or with its sources' `helm.valueFiles` merged in, when it is an Argo CD
    /// Application with value files, or with its HelmChartConfig merged in, when it is a
    /// RKE2/k3s HelmChart whose HelmChartConfig is in the run (helm-controller's order, cited at
    /// `resolve_chart_config`); None otherwise.
    pub fn resolve(&self, object: &Value) -> Option<Resolved> {
        if let Some((_, resolved)) = self.kustomizations.iter().find(|(k, _)| k == object) {
            return Some(resolved.clone());
        }
        let api = object.get("apiVersion").and_then(Value::as_str)?;
        if api == "helm.cattle.io/v1" {
            return self.resolve_chart_config(object);
        }
        if api == "argoproj.io/v1alpha1"
            && object.get("kind").and_then(Value::as_str) == Some("Application")
        {
            return self.resolve_value_files(object);
        }
        if !api.starts_with("helm.toolkit.fluxcd.io/")
            || object.get("kind").and_then(Value::as_str) != Some("HelmRelease")
        {
            return None;
        }
        // A `chartRef` to a chart source of the run: the release is read as that chart.
        let with_chart = self.with_chart_ref(object);
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
            let found = match self.lookup(kind, namespace, name, key) {
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

/// The Helm charts of a run: the directories that hold a `Chart.yaml` among the inputs, with
/// the chart's name and the names and aliases of its dependencies. `--values-for` globs match
/// path suffixes, so `values.yaml` matches every chart's values file; a values file inside
/// another chart's directory is not that chart's values unless the chart depends on it.
#[derive(Debug, Default)]
pub struct ChartDirs {
    charts: HashMap<PathBuf, ChartInfo>,
}

/// What a `Chart.yaml` says.
#[derive(Debug)]
struct ChartInfo {
    /// The input name of the `Chart.yaml`.
    file: String,
    /// `name`.
    name: String,
    /// Each dependency's `name` and `alias`.
    uses: Vec<String>,
    /// Each dependency's `name` and what switches it and the key its values are under in
    /// this chart's values (`alias` when set, else `name`).
    keys: Vec<(String, Dependency)>,
}

impl ChartDirs {
    /// Reads every input named `Chart.yaml`.
    pub fn build(inputs: &[Input]) -> Self {
        let mut charts = HashMap::new();
        for input in inputs {
            let (Some(path), Content::Text(text)) = (input.path.as_deref(), &input.content) else {
                continue;
            };
            if path.file_name().is_none_or(|n| n != "Chart.yaml") {
                continue;
            }
            let Ok(json) = yaml::parse_one(text).and_then(|n| n.to_json()) else {
                continue;
            };
            let Some(name) = json.get("name").and_then(Value::as_str) else {
                continue;
            };
            let uses = json
                .get("dependencies")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .flat_map(|d| ["name", "alias"].map(|k| d.get(k).and_then(Value::as_str)))
                .flatten()
                .map(str::to_owned)
                .collect();
            let keys = json
                .get("dependencies")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Dependency::from_entry)
                .collect();
            let dir = normalize(path.parent().unwrap_or(Path::new("")));
            charts.insert(
                dir,
                ChartInfo {
                    file: input.name.clone(),
                    name: name.to_owned(),
                    uses,
                    keys,
                },
            );
        }
        ChartDirs { charts }
    }

    /// Each chart directory (normalized) and the chart's name.
    pub fn dirs(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.charts
            .iter()
            .map(|(dir, info)| (dir.as_path(), info.name.as_str()))
    }

    /// The dependency on `chart` of the umbrella chart in whose directory the values file at
    /// `path` is: its key (`alias`, under which Helm passes a subchart its values, else its
    /// name) and what switches it. None for a file of `chart` itself or outside any chart.
    pub fn subchart(&self, path: Option<&Path>, chart: &str) -> Option<&Dependency> {
        let path = normalize(path?);
        let info = path
            .ancestors()
            .skip(1)
            .find_map(|dir| self.charts.get(dir))?;
        if info.name == chart {
            return None;
        }
        info.keys
            .iter()
            .find(|(name, _)| name == chart)
            .map(|(_, dependency)| dependency)
    }

    /// Why the values file at `path` is not a values file of `chart` (it is inside the
    /// directory of another chart that does not depend on `chart`), or None.
    pub fn foreign(&self, path: Option<&Path>, chart: &str) -> Option<String> {
        let path = normalize(path?);
        let info = path
            .ancestors()
            .skip(1)
            .find_map(|dir| self.charts.get(dir))?;
        if info.name == chart || info.uses.iter().any(|u| u == chart) {
            return None;
        }
        Some(format!(
            "--values-for names chart {chart}, but this file is in the directory of chart {} \
             ({}), which does not depend on it: not read as {chart} values",
            info.name, info.file
        ))
    }
}

/// Why a reference did not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lookup {
    /// No such object in the run.
    Absent,
    /// Objects that disagree, or a value that cannot be read.
    Unknown,
}

/// The (namespace, name) of a `helm.cattle.io/v1` object of `kind`.
fn helm_cattle_key(json: &Value, kind: &str) -> Option<(Option<String>, String)> {
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
/// `spec.valuesSecrets` come after these, [`ValuesIndex::secret_layers`]).
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
fn merge_maps(base: &mut Value, over: Value) {
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

/// Removes one pair of matching quotes around a kustomize literal value.
fn unquote(value: &str) -> String {
    for q in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(q) && value.ends_with(q) {
            return value[1..value.len() - 1].to_owned();
        }
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn secret_values_are_secret_text() {
        let inputs = [input(
            "a/objects.yaml",
            "# read by a valuesFrom\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {k: hunter2}\n\
             ---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {k: plain}\n",
        )];
        let index = ValuesIndex::build(&inputs);
        let debug = format!("{index:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("SecretText(7 bytes)"),
            "{debug}"
        );
        assert!(debug.contains("plain"), "{debug}");
    }
    use serde_json::json;

    fn input(name: &str, text: &str) -> Input {
        Input {
            name: name.to_owned(),
            path: Some(PathBuf::from(name)),
            content: Content::Text(text.to_owned()),
            identity: None,
            rendered: false,
        }
    }

    fn release(values_from: Value, values: Value) -> Value {
        json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager"}},
                "valuesFrom": values_from, "values": values}})
    }

    #[test]
    fn merges_in_flux_order_with_target_path_and_spec_values_on_top() {
        let index = ValuesIndex::build(&[
            input(
                "a/objects.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base, namespace: kube-system}\n\
                 data:\n  values.yaml: |\n    cloudConfig:\n      loadBalancer:\n        \
                 provider-requires-serial-api-calls: false\n        subnet-id: s\n\
                 ---\napiVersion: v1\nkind: Secret\nmetadata: {name: flag}\n\
                 stringData: {serial: \"true\", quoted: \"'false'\"}\n",
            ),
            input("a/hr.yaml", "valuesFrom: []\n"),
        ]);
        let object = release(
            json!([{"kind": "ConfigMap", "name": "base"},
                {"kind": "Secret", "name": "flag", "valuesKey": "serial",
                 "targetPath": "cloudConfig.loadBalancer.provider-requires-serial-api-calls"},
                {"kind": "Secret", "name": "flag", "valuesKey": "quoted", "targetPath": "x\\.y"},
                {"kind": "Secret", "name": "missing", "optional": true}]),
            json!({"cloudConfig": {"global": {"region": "r"}}}),
        );
        let resolved = index
            .resolve(&object)
            .expect("a HelmRelease with references");
        assert_eq!(
            resolved.object["spec"]["values"],
            json!({"cloudConfig": {"loadBalancer": {"provider-requires-serial-api-calls": true,
                "subnet-id": "s"}, "global": {"region": "r"}}, "x.y": "false"})
        );
        assert!(resolved.object["spec"].get("valuesFrom").is_none());
        let sources = resolved.sources.expect("all resolved");
        assert_eq!(
            sources[0],
            "ConfigMap base key values.yaml, from a/objects.yaml:1"
        );
    }

    #[test]
    fn kustomize_generator_files_and_unresolved_references() {
        let index = ValuesIndex::build(&[
            input(
                "app/kustomization.yaml",
                "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
                 namespace: occm\nsecretGenerator:\n- name: vals\n  files:\n  \
                 - v.yaml=helm-values/v.yaml\n  literals:\n  - region=\"r1\"\n",
            ),
            input(
                "app/helm-values/v.yaml",
                "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: true\n",
            ),
            input("app/hr.yaml", "valuesFrom"),
        ]);
        let mut object = release(
            json!([{"kind": "Secret", "name": "vals", "valuesKey": "v.yaml"},
                {"kind": "Secret", "name": "vals", "valuesKey": "region",
                 "targetPath": "cloudConfig.global.region"}]),
            Value::Null,
        );
        object["metadata"]["namespace"] = json!("occm");
        let resolved = index.resolve(&object).expect("resolves");
        assert_eq!(
            resolved.object["spec"]["values"],
            json!({"cloudConfig": {"loadBalancer": {"provider-requires-serial-api-calls": true},
                "global": {"region": "r1"}}})
        );
        assert_eq!(
            resolved.sources.expect("all resolved")[0],
            "Secret vals key v.yaml, from app/helm-values/v.yaml"
        );
        // Another namespace's Secret of that name is not the one referred to, and a required
        // reference to an object the run lacks stays for the engine to report.
        object["metadata"]["namespace"] = json!("other");
        let resolved = index.resolve(&object).expect("a HelmRelease");
        assert_eq!(resolved.sources, None);
        assert_eq!(
            resolved.object["spec"]["valuesFrom"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
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
    fn values_files_of_other_charts_are_foreign() {
        let charts = ChartDirs::build(&[
            input("charts/tempo/Chart.yaml", "apiVersion: v2\nname: tempo\n"),
            input(
                "addons/Chart.yaml",
                "apiVersion: v2\nname: addons\ndependencies:\n- name: openstack-cloud-controller-manager\n  alias: occm\n",
            ),
        ]);
        let ccm = "openstack-cloud-controller-manager";
        let foreign = |p: &str, c: &str| charts.foreign(Some(Path::new(p)), c);
        // An umbrella chart's values file holds the dependency's values under its alias.
        let key = |p: &str| {
            charts
                .subchart(Some(Path::new(p)), ccm)
                .map(|d| d.key.as_str())
        };
        assert_eq!(key("addons/values.yaml"), Some("occm"));
        assert_eq!(key("clusters/a/occm-values.yaml"), None);
        assert!(foreign("charts/tempo/values.yaml", ccm).is_some());
        assert!(foreign("./charts/tempo/ci/values-ci.yaml", ccm).is_some());
        assert_eq!(foreign("charts/tempo/values.yaml", "tempo"), None);
        assert_eq!(foreign("addons/values.yaml", ccm), None);
        assert_eq!(foreign("clusters/a/occm-values.yaml", ccm), None);
    }

    #[test]
    fn argo_value_files_by_source_path_and_ref() {
        let index = ValuesIndex::build(&[
            input(
                "repo/apps/app.yaml",
                "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: a}\n\
                 spec:\n  sources:\n  - chart: openstack-cloud-controller-manager\n    helm:\n      \
                 valueFiles: [$v/clusters/a/occm.yaml, https://x/y.yaml]\n  - ref: v\n",
            ),
            input(
                "repo/clusters/a/occm.yaml",
                "cloudConfig: {global: {region: r}}\n",
            ),
            input(
                "repo/clusters/b/occm.yaml",
                "cloudConfig: {global: {region: s}}\n",
            ),
        ]);
        assert_eq!(index.files.len(), 1);
        let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "a"},
            "spec": {"source": {"path": "charts/x/../occm", "helm": {
                "valueFiles": ["../../clusters/a/occm.yaml"], "values": "secret: {name: cc}"}},
                "sources": [{"chart": "c", "helm": {"valueFiles": ["$v/clusters/a/occm.yaml", "$v/nope.yaml"]}}]}});
        let resolved = index
            .resolve(&app)
            .expect("an Application with value files");
        assert_eq!(
            resolved.object["spec"]["source"]["helm"],
            json!({"valuesObject": {"cloudConfig": {"global": {"region": "r"}}, "secret": {"name": "cc"}}})
        );
        assert_eq!(
            resolved.object["spec"]["sources"][0]["helm"]["valueFiles"],
            json!(["$v/nope.yaml"])
        );
        assert_eq!(resolved.sources, None);
    }

    fn helm_chart(values_content: &str, set: Value) -> Value {
        json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": "openstack-cloud-controller-manager",
                "valuesContent": values_content, "set": set}})
    }

    const CONFIG: &str = "apiVersion: helm.cattle.io/v1\nkind: HelmChartConfig\nmetadata:\n  \
        name: occm\n  namespace: kube-system\nspec:\n  valuesContent: |-\n    a: config\n    \
        b: config\n  values:\n    b: values\n";

    #[test]
    fn helm_chart_config_merges_over_the_chart_in_helm_controller_order() {
        let index = ValuesIndex::build(&[input("rke2/config.yaml", CONFIG)]);
        let chart = helm_chart("a: chart\nc: chart\n", json!({"a": "set"}));
        let resolved = index.resolve(&chart).expect("resolved");
        let text = resolved.object["spec"]["valuesContent"]
            .as_str()
            .expect("text");
        let merged = yaml::parse_one(text)
            .and_then(|n| n.to_json())
            .expect("YAML");
        // Chart valuesContent < config valuesContent < config values; spec.set stays (the
        // carrier applies it on top).
        assert_eq!(merged, json!({"a": "config", "b": "values", "c": "chart"}));
        assert_eq!(resolved.object["spec"]["set"], json!({"a": "set"}));
        assert_eq!(resolved.merge, Merge::HelmChartConfig);
        let key = |k: &str| vec![k.to_owned()];
        assert_eq!(
            resolved.place_of(&key("b")),
            Some(Place::Input {
                input: "rke2/config.yaml".to_owned(),
                line: 11,
                what: "HelmChartConfig kube-system/occm spec.values".to_owned(),
            })
        );
        assert_eq!(
            resolved.place_of(&key("a")),
            Some(Place::Input {
                input: "rke2/config.yaml".to_owned(),
                line: 8,
                what: "HelmChartConfig kube-system/occm spec.valuesContent".to_owned(),
            })
        );
        assert!(matches!(
            resolved.place_of(&key("c")),
            Some(Place::Own(Some(_)))
        ));
        assert_eq!(resolved.place_of(&key("d")), None);
        assert_eq!(
            index.config_merged_into(
                &yaml::parse_one(CONFIG)
                    .and_then(|n| n.to_json())
                    .expect("json")
            ),
            None,
            "the HelmChart is not among the inputs"
        );
    }

    #[test]
    fn helm_chart_config_is_not_merged_when_it_cannot_be_told() {
        let chart = helm_chart("a: chart\n", Value::Null);
        // Two HelmChartConfigs of the name, one that reads values from Secrets, another name.
        let twice = format!("{CONFIG}---\n{CONFIG}");
        let secrets = CONFIG.replace(
            "spec:\n",
            "spec:\n  valuesSecrets: [{name: s, keys: [v]}]\n",
        );
        let other = CONFIG.replace("name: occm", "name: other");
        for text in [twice.as_str(), secrets.as_str(), other.as_str()] {
            let index = ValuesIndex::build(&[input("config.yaml", text)]);
            assert_eq!(index.resolve(&chart), None, "{text}");
        }
        // With the HelmChart among the inputs, the HelmChartConfig is reported through it.
        let chart_text = "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  \
            name: occm\n  namespace: kube-system\nspec:\n  chart: openstack-cloud-controller-manager\n";
        let index = ValuesIndex::build(&[
            input("config.yaml", CONFIG),
            input("chart.yaml", chart_text),
        ]);
        let config = yaml::parse_one(CONFIG)
            .and_then(|n| n.to_json())
            .expect("json");
        assert_eq!(
            index.config_merged_into(&config).as_deref(),
            Some("kube-system/occm")
        );
        // A second HelmChartConfig without a namespace: the HelmChart takes the one of its
        // namespace, so the other is not folded into it (it is checked alone).
        let loose = CONFIG.replace("  namespace: kube-system\n", "");
        let both = format!("{CONFIG}---\n{loose}");
        let index =
            ValuesIndex::build(&[input("config.yaml", &both), input("chart.yaml", chart_text)]);
        let loose = yaml::parse_one(&loose)
            .and_then(|n| n.to_json())
            .expect("json");
        assert_eq!(
            index.config_merged_into(&config).as_deref(),
            Some("kube-system/occm")
        );
        assert_eq!(index.config_merged_into(&loose), None);
    }

    #[test]
    fn nothing_is_indexed_without_values_from() {
        let index = ValuesIndex::build(&[input(
            "x.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: base}\ndata: {a: b}\n",
        )]);
        assert!(index.objects.is_empty());
    }
}
