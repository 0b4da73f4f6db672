//! Helm-values sites: the `openstack-cloud-controller-manager` chart's values inside GitOps
//! objects, and the chart's `controllerExtraArgs`.
//!
//! | object | chart named in | values |
//! |---|---|---|
//! | Flux `HelmRelease` (`helm.toolkit.fluxcd.io` v2, v2beta2, v2beta1) | `spec.chart.spec.chart`, else `spec.chartRef.name` | `spec.values` (structured) |
//! | Argo CD `Application` (`argoproj.io/v1alpha1`) | `spec.source.chart` (or the last segment of `spec.source.path`), same for each `spec.sources[]` | `helm.valuesObject` (structured), `helm.values` (YAML string) |
//! | RKE2/k3s `HelmChart` (`helm.cattle.io/v1`) | `spec.chart` (name, `repo/name`, URL or OCI reference) | `spec.valuesContent` (YAML string) |
//! | RKE2/k3s `HelmChartConfig` (`helm.cattle.io/v1`) | `metadata.name` (it customises the HelmChart of that name) | `spec.valuesContent` (YAML string) |
//! | a plain values file (`stackgate check --values-for`) | the flag | the whole file |
//!
//! Inside the values, the chart renders its Secret `cloud.conf` from `cloudConfigContents`
//! (raw INI) when that is set, else from the structured `cloudConfig` map
//! ([`super::render`]); with `secret.enabled` or `secret.create` false it renders no Secret,
//! so the values are not a site (the externally provided Secret is checked on its own).

use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use jsonptr::PointerBuf;
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::{Map, Value};

use super::render::{self, Origin};
use super::{Anchor, FoundConfig, Holder, SiteError};
use crate::cloudconf::Document;
use crate::cloudconf::IniEdit;
use crate::yaml::edit::{self as yamledit, Change};
use crate::yaml::{self, Node, Seg};

/// Largest Helm values string (`valuesContent`, Argo `helm.values`) stackgate parses for the
/// CCM chart, in bytes. The chart's values are a few KiB; parsed YAML costs hundreds of bytes
/// per node, so a larger string is reported as one stackgate cannot check instead.
pub const MAX_VALUES_TEXT_BYTES: usize = 64 * 1024;

/// Most places in one object that carry the CCM chart's values (Argo CD `spec.sources`
/// entries naming the chart, each with `valuesObject` and `values`). Real Applications have one
/// or two; more are reported, and none is read.
pub const MAX_CARRIERS_PER_OBJECT: usize = 8;

/// Charts whose values hold an OpenStack CCM cloud config, when the policy set names none.
pub const DEFAULT_CHARTS: &[&str] = &["openstack-cloud-controller-manager"];

/// Group and version of the synthetic object `stackgate check` builds for a plain values
/// file: `{apiVersion: stackgate.dev/v1alpha1, kind: HelmValues, chart: <name>, values: {...}}`.
pub const VALUES_FILE_API_VERSION: &str = "stackgate.dev/v1alpha1";
/// Kind of the synthetic values-file object.
pub const VALUES_FILE_KIND: &str = "HelmValues";

/// How the values are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// A JSON/YAML map in the object.
    Structured,
    /// A YAML text in a string field.
    YamlString,
}

/// One place in an object that holds chart values.
#[derive(Debug, Clone)]
struct Carrier {
    /// Path of the values map or of the string field, from the object root.
    path: Vec<Seg>,
    /// How many leading segments of `path` exist as mappings in the object (== len when the
    /// carrier itself exists).
    existing: usize,
    encoding: Encoding,
}

/// Where a Helm site's cloud config comes from.
#[derive(Debug, Clone, PartialEq)]
enum Form {
    /// Rendered from `cloudConfig`; the origin of each rendered line.
    CloudConfig(Vec<Origin>),
    /// `cloudConfigContents` (raw INI).
    Contents,
}

/// A Helm-values site.
#[derive(Debug, Clone, PartialEq)]
struct HelmSite {
    /// Path of the values map or the string field.
    path: Vec<Seg>,
    /// How many leading segments of `path` exist as mappings.
    existing: usize,
    /// How messages name the carrier (`spec.values`; empty for a values file).
    field: String,
    /// The values text, when the values are a YAML string.
    yaml: Option<String>,
    /// The values text parsed with positions, read once on first use: every finding's
    /// message and location asks for it, and parsing per finding was quadratic.
    tree: std::sync::OnceLock<Option<Node>>,
    /// The parsed values (null when absent or unreadable).
    values: Value,
    /// Where the cloud config comes from.
    form: Form,
}

/// The chart names a policy set's sites document asks for.
pub fn chart_names(sites: &super::SitesDocument) -> Vec<String> {
    // The sites document has no chart list yet: use the default.
    let _ = sites;
    DEFAULT_CHARTS.iter().map(|s| (*s).to_owned()).collect()
}

/// Whether a chart reference (`name`, `repo/name`, `./charts/name`, `oci://…/name`,
/// `https://…/name-1.2.3.tgz`) names one of `charts`.
pub fn chart_matches(reference: &str, charts: &[String]) -> bool {
    let last = reference
        .trim()
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    let last = last.split([':', '@']).next().unwrap_or_default();
    charts.iter().any(|c| {
        last == c
            || last
                .strip_suffix(".tgz")
                .and_then(|stem| stem.strip_prefix(c.as_str()))
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|version| version.starts_with(|ch: char| ch.is_ascii_digit()))
    })
}

/// A display path: `spec.sources[1].helm.values`.
pub fn display(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The JSON pointer of a path.
pub fn pointer(path: &[Seg]) -> PointerBuf {
    PointerBuf::from_tokens(path.iter().map(|s| match s {
        Seg::Key(k) => k.clone(),
        Seg::Index(i) => i.to_string(),
    }))
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

fn carrier(root: &Value, path: Vec<Seg>, encoding: Encoding) -> Carrier {
    let mut existing = 0;
    let mut node = root;
    for seg in &path {
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
    Carrier {
        path,
        existing,
        encoding,
    }
}

/// The values carriers of `object` for the charts in `charts`.
fn carriers(gvk: &GroupVersionKind, object: &DynamicObject, charts: &[String]) -> Vec<Carrier> {
    let root = content(object);
    // (chart reference, values path, encoding) for kinds with one carrier.
    let single: Option<(Option<&str>, &[&str], Encoding)> =
        match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
            ("helm.toolkit.fluxcd.io", "v2" | "v2beta2" | "v2beta1", "HelmRelease") => Some((
                str_at(root, &["spec", "chart", "spec", "chart"])
                    .or_else(|| str_at(root, &["spec", "chartRef", "name"])),
                &["spec", "values"],
                Encoding::Structured,
            )),
            ("helm.cattle.io", "v1", "HelmChart") => Some((
                str_at(root, &["spec", "chart"]),
                &["spec", "valuesContent"],
                Encoding::YamlString,
            )),
            // A HelmChartConfig customises the HelmChart of the same name.
            ("helm.cattle.io", "v1", "HelmChartConfig") => Some((
                object.metadata.name.as_deref(),
                &["spec", "valuesContent"],
                Encoding::YamlString,
            )),
            ("stackgate.dev", "v1alpha1", VALUES_FILE_KIND) => {
                Some((str_at(root, &["chart"]), &["values"], Encoding::Structured))
            }
            ("argoproj.io", "v1alpha1", "Application") => return argo_carriers(root, charts),
            _ => None,
        };
    match single {
        Some((Some(chart), path, encoding)) if chart_matches(chart, charts) => {
            vec![carrier(root, keys(path), encoding)]
        }
        _ => Vec::new(),
    }
}

/// Argo CD: `spec.source` and each `spec.sources[]` whose chart (or path) names the chart;
/// `helm.valuesObject` (also when neither is set: that is where values would go) and
/// `helm.values` (a YAML string).
fn argo_carriers(root: &Value, charts: &[String]) -> Vec<Carrier> {
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
    for base in sources {
        let Some(source) = get(root, &base) else {
            continue;
        };
        let chart = source
            .get("chart")
            .and_then(Value::as_str)
            .or_else(|| source.get("path").and_then(Value::as_str));
        if !chart.is_some_and(|c| chart_matches(c, charts)) {
            continue;
        }
        let helm = source.get("helm");
        let has = |field: &str| {
            helm.and_then(|h| h.get(field))
                .is_some_and(|v| !v.is_null())
        };
        let with = |field: &str| {
            let mut p = base.clone();
            p.extend(keys(&["helm", field]));
            p
        };
        if has("valuesObject") || !has("values") {
            out.push(carrier(root, with("valuesObject"), Encoding::Structured));
        }
        if has("values") {
            out.push(carrier(root, with("values"), Encoding::YamlString));
        }
    }
    out
}

/// The object description used in messages: `HelmRelease kube-system/occm`, or
/// `values file clusters/a/values.yaml` for a plain values file.
pub fn object_name(gvk: &GroupVersionKind, object: &DynamicObject) -> String {
    let name = object.metadata.name.as_deref().unwrap_or("");
    if gvk.group == "stackgate.dev" && gvk.kind == VALUES_FILE_KIND {
        return format!("values file {name}");
    }
    match object.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{} {ns}/{name}", gvk.kind),
        _ => format!("{} {name}", gvk.kind),
    }
}

/// A Helm site found in an object: the INI text (or why not) and the site.
struct Found {
    location: String,
    text: Result<String, SiteError>,
    site: HelmSite,
}

/// Finds the cloud configs in the values of the charts in `charts` that `object` holds.
pub(super) fn find(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    charts: &[String],
) -> Vec<FoundConfig> {
    let object_name = object_name(gvk, object);
    find_values(gvk, object, charts)
        .into_iter()
        .map(|f| FoundConfig::new(object_name.clone(), f.location, f.text, f.site))
        .collect()
}

/// Finds the Helm-values sites of `object`.
fn find_values(gvk: &GroupVersionKind, object: &DynamicObject, charts: &[String]) -> Vec<Found> {
    let root = content(object);
    let values_file = gvk.group == "stackgate.dev" && gvk.kind == VALUES_FILE_KIND;
    let mut out = Vec::new();
    let carriers = carriers(gvk, object, charts);
    if carriers.len() > MAX_CARRIERS_PER_OBJECT {
        // Each values string is parsed with caps of its own; an object with hundreds of them
        // would multiply those caps. None is read, and the object is reported instead.
        let location = display(&keys(&["spec", "sources"]));
        out.push(Found {
            location: location.clone(),
            text: Err(SiteError::TooManyCarriers {
                location,
                count: carriers.len(),
                limit: MAX_CARRIERS_PER_OBJECT,
            }),
            site: HelmSite {
                path: Vec::new(),
                existing: 0,
                field: String::new(),
                yaml: None,
                tree: std::sync::OnceLock::new(),
                values: Value::Null,
                form: Form::Contents,
            },
        });
        return out;
    }
    for c in carriers {
        let raw = if c.existing == c.path.len() {
            get(root, &c.path)
        } else {
            None
        };
        let mut site = HelmSite {
            path: c.path.clone(),
            existing: c.existing,
            field: if values_file {
                String::new()
            } else {
                display(&c.path)
            },
            yaml: None,
            tree: std::sync::OnceLock::new(),
            values: Value::Null,
            form: Form::Contents,
        };
        let field = display(&c.path);
        let values = match c.encoding {
            Encoding::Structured => raw.cloned().unwrap_or(Value::Null),
            Encoding::YamlString => {
                let text = match raw {
                    None => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(_) => {
                        out.push(Found {
                            location: field.clone(),
                            text: Err(SiteError::NotAString { location: field }),
                            site,
                        });
                        continue;
                    }
                };
                if text.len() > MAX_VALUES_TEXT_BYTES {
                    out.push(Found {
                        location: field.clone(),
                        text: Err(SiteError::TooLarge {
                            location: field,
                            size: text.len(),
                            limit: MAX_VALUES_TEXT_BYTES,
                        }),
                        site,
                    });
                    continue;
                }
                site.yaml = Some(text.clone());
                match yaml::parse_one(&text).and_then(|n| n.to_json()) {
                    Ok(v) => v,
                    Err(error) => {
                        out.push(Found {
                            location: field.clone(),
                            text: Err(SiteError::Yaml {
                                location: field,
                                error,
                            }),
                            site,
                        });
                        continue;
                    }
                }
            }
        };
        if !renders_secret(&values) {
            continue;
        }
        site.values = values;
        let contents = site
            .values
            .get("cloudConfigContents")
            .filter(|v| truthy(v))
            .cloned();
        let (location, text) = match contents {
            Some(Value::String(ini)) => (site.join(&["cloudConfigContents"]), Ok(ini)),
            Some(_) => {
                let location = site.join(&["cloudConfigContents"]);
                (location.clone(), Err(SiteError::NotAString { location }))
            }
            None => {
                let location = site.join(&["cloudConfig"]);
                match render::render(site.values.get("cloudConfig")) {
                    Ok(r) => {
                        site.form = Form::CloudConfig(r.lines);
                        (location, Ok(r.text))
                    }
                    Err(error) => {
                        site.form = Form::CloudConfig(Vec::new());
                        (location.clone(), Err(SiteError::Render { location, error }))
                    }
                }
            }
        };
        out.push(Found {
            location,
            text,
            site,
        });
    }
    out
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

/// Whether the chart renders its cloud-config Secret with these values: `secret.enabled` and
/// `secret.create` default to true and only an explicit falsy value turns them off.
fn renders_secret(values: &Value) -> bool {
    let Some(secret) = values.get("secret") else {
        return true;
    };
    ["enabled", "create"]
        .iter()
        .all(|k| secret.get(k).is_none_or(truthy))
}

impl HelmSite {
    /// `spec.values.cloudConfig` / `spec.valuesContent, cloudConfig`.
    fn join(&self, inner: &[&str]) -> String {
        let field = &self.field;
        let inner = inner.join(".");
        match (&self.yaml, field.is_empty()) {
            (_, true) => inner,
            (Some(_), false) => format!("{field}, {inner}"),
            (None, false) => format!("{field}.{inner}"),
        }
    }

    /// The values path (inside the values) a line of the cloud config comes from, and whether
    /// it names a key (as opposed to a section or the whole config).
    fn values_path(&self, line: Option<usize>) -> Vec<String> {
        match (&self.form, line) {
            (Form::Contents, _) => vec!["cloudConfigContents".to_owned()],
            (Form::CloudConfig(lines), Some(l)) => {
                match l.checked_sub(1).and_then(|i| lines.get(i)) {
                    // A key the CCM does not know may be a value typed in the wrong place:
                    // named only when known or a plausible typo (invariant 5).
                    Some(Origin::Key(section, key)) => {
                        let key = if crate::cloudconf::schema::is_displayable_key(key) {
                            key.clone()
                        } else {
                            "<unknown key, name not shown>".to_owned()
                        };
                        vec!["cloudConfig".into(), (*section).into(), key]
                    }
                    Some(Origin::Section(section)) => vec!["cloudConfig".into(), (*section).into()],
                    None => vec!["cloudConfig".to_owned()],
                }
            }
            (Form::CloudConfig(_), None) => vec!["cloudConfig".to_owned()],
        }
    }

    /// The parsed values text (YAML-string carriers).
    fn tree(&self) -> Option<(&str, &Node)> {
        let text = self.yaml.as_deref()?;
        let root = self.tree.get_or_init(|| yaml::parse_one(text).ok());
        root.as_ref().map(|n| (text, n))
    }

    /// The line of the values text that `line` of the cloud config comes from.
    fn values_line(&self, line: Option<usize>) -> Option<usize> {
        let (text, root) = self.tree()?;
        let path: Vec<Seg> = self.values_path(line).iter().map(|k| Seg::key(k)).collect();
        match &self.form {
            Form::Contents => {
                let node = root.at(&path)?;
                Some(yaml::line_within_scalar(text, node, line.unwrap_or(1)))
            }
            Form::CloudConfig(_) => {
                let (used, _, key_line) = root.deepest(&path);
                (used > 0).then_some(key_line)
            }
        }
    }
}

impl super::Carrier for HelmSite {
    fn patch(&self, edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation> {
        match (&self.yaml, &self.form) {
            (None, Form::Contents) => {
                let mut path = self.path.clone();
                path.push(Seg::key("cloudConfigContents"));
                vec![PatchOperation::Replace(ReplaceOperation {
                    path: pointer(&path),
                    value: Value::String(edited.to_text()),
                })]
            }
            (None, Form::CloudConfig(_)) => self.structured_ops(edits),
            (Some(text), form) => {
                let new_text = self.edit_values_text(text, form, edited, edits);
                let op_path = pointer(&self.path);
                if self.existing == self.path.len() {
                    vec![PatchOperation::Replace(ReplaceOperation {
                        path: op_path,
                        value: Value::String(new_text),
                    })]
                } else {
                    vec![self.add_missing(&[], Value::String(new_text))]
                }
            }
        }
    }

    fn trace(&self, line: Option<usize>) -> Anchor {
        if self.yaml.is_some() {
            return match self.values_line(line) {
                Some(l) => Anchor::TextLine {
                    path: self.path.clone(),
                    line: l,
                },
                None => Anchor::Node(self.path.clone()),
            };
        }
        let mut path = self.path.clone();
        path.extend(self.values_path(line).iter().map(|k| Seg::key(k)));
        match (&self.form, line) {
            (Form::Contents, Some(l)) => Anchor::TextLine { path, line: l },
            _ => Anchor::Node(path),
        }
    }

    fn pointer(&self) -> String {
        let mut path = self.path.clone();
        if self.yaml.is_none() {
            path.push(Seg::key(match self.form {
                Form::Contents => "cloudConfigContents",
                Form::CloudConfig(_) => "cloudConfig",
            }));
        }
        pointer(&path).to_string()
    }

    fn describe(&self, line: Option<usize>) -> String {
        let path = self.values_path(line);
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        let mut out = self.join(&names);
        if let (Form::Contents, Some(l)) = (&self.form, line) {
            out.push_str(&format!(" line {l}"));
        }
        if let Some(vl) = self.values_line(line) {
            out.push_str(&format!(" (line {vl} of the values)"));
        }
        out
    }

    fn holder(&self) -> Holder {
        Holder::HelmValues
    }
}

impl HelmSite {
    /// `add` operations that set each edited key in the structured values, creating the
    /// missing parents (`cloudConfig`, the section, or the values themselves).
    fn structured_ops(&self, edits: &[IniEdit]) -> Vec<PatchOperation> {
        let mut values = self.values.clone();
        let mut ops = Vec::new();
        let mut carrier_exists = self.existing == self.path.len() && values.is_object();
        for edit in edits {
            let Some((rel, leaf)) = edit_target(&values, edit) else {
                continue;
            };
            if !carrier_exists {
                let nested = nest(&rel, leaf);
                ops.push(self.add_missing(&[], nested.clone()));
                values = nested;
                carrier_exists = true;
                continue;
            }
            // The first segment whose value is missing or not a map gets the rest nested.
            let mut node = &values;
            let mut split = rel.len() - 1;
            for (i, k) in rel[..rel.len() - 1].iter().enumerate() {
                match node.get(k) {
                    Some(child) if child.is_object() => node = child,
                    _ => {
                        split = i;
                        break;
                    }
                }
            }
            let value = nest(&rel[split + 1..], leaf);
            let mut path = self.path.clone();
            path.extend(rel[..=split].iter().map(|k| Seg::key(k)));
            ops.push(PatchOperation::Add(AddOperation {
                path: pointer(&path),
                value: value.clone(),
            }));
            json_put(&mut values, &rel[..=split], value);
        }
        ops
    }

    /// An `add` of `value` at `self.path + rel`, starting at the first missing segment of the
    /// carrier path.
    fn add_missing(&self, rel: &[String], value: Value) -> PatchOperation {
        let existing = self.existing.min(self.path.len());
        let mut tail: Vec<String> = self.path[existing..]
            .iter()
            .filter_map(|s| match s {
                Seg::Key(k) => Some(k.clone()),
                Seg::Index(_) => None,
            })
            .collect();
        tail.extend(rel.iter().cloned());
        let (first, rest) = tail
            .split_first()
            .map_or((None, &[][..]), |(f, r)| (Some(f.clone()), r));
        let mut path = self.path[..existing].to_vec();
        if let Some(first) = first {
            path.push(Seg::Key(first));
        }
        PatchOperation::Add(AddOperation {
            path: pointer(&path),
            value: nest(rest, value),
        })
    }

    /// The values text with the edits applied: one line changed or inserted per edit where
    /// the text allows it, else the whole values written as JSON (valid YAML).
    fn edit_values_text(
        &self,
        text: &str,
        form: &Form,
        edited: &Document,
        edits: &[IniEdit],
    ) -> String {
        let mut values = self.values.clone();
        let mut current = text.to_owned();
        let mut minimal = true;
        let mut changes: Vec<Change> = Vec::new();
        match form {
            Form::Contents => changes.push(Change::Set {
                path: vec![Seg::key("cloudConfigContents")],
                value: Value::String(edited.to_text()),
            }),
            Form::CloudConfig(_) => {
                for edit in edits {
                    if let Some((rel, leaf)) = edit_target(&values, edit) {
                        json_put(&mut values, &rel, leaf.clone());
                        changes.push(Change::Set {
                            path: rel.iter().map(|k| Seg::key(k)).collect(),
                            value: leaf,
                        });
                    }
                }
            }
        }
        for change in &changes {
            match yamledit::apply(&current, 0, change) {
                Ok(next) => current = next,
                Err(_) => {
                    minimal = false;
                    break;
                }
            }
        }
        if minimal {
            return current;
        }
        // Fallback: the whole values as JSON, which Helm reads as YAML.
        let mut values = self.values.clone();
        for change in &changes {
            let Change::Set { path, value } = change;
            let keys: Vec<String> = path
                .iter()
                .filter_map(|s| match s {
                    Seg::Key(k) => Some(k.clone()),
                    Seg::Index(_) => None,
                })
                .collect();
            json_put(&mut values, &keys, value.clone());
        }
        serde_json::to_string_pretty(&values)
            .map(|s| s + "\n")
            .unwrap_or(current)
    }
}

/// Where an INI edit goes in the values: `cloudConfig.<section>.<key>` (the key spelled as an
/// existing key that gcfg would match, if any) and the JSON value.
fn edit_target(values: &Value, edit: &IniEdit) -> Option<(Vec<String>, Value)> {
    let section = render::values_key(edit.section)?;
    let existing = values
        .get("cloudConfig")
        .and_then(|c| c.get(section))
        .and_then(Value::as_object)
        .and_then(|m| {
            m.keys()
                .rfind(|k| k.eq_ignore_ascii_case(edit.key))
                .cloned()
        });
    let key = existing.unwrap_or_else(|| edit.key.to_owned());
    let leaf = match edit.value {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        other => Value::String(other.to_owned()),
    };
    Some((
        vec!["cloudConfig".to_owned(), section.to_owned(), key],
        leaf,
    ))
}

/// `{a: {b: leaf}}` for `keys = [a, b]`.
fn nest(keys: &[String], leaf: Value) -> Value {
    keys.iter().rev().fold(leaf, |acc, k| {
        let mut m = Map::new();
        m.insert(k.clone(), acc);
        Value::Object(m)
    })
}

/// Sets `keys` to `value` in `root`, replacing non-map parents.
fn json_put(root: &mut Value, keys: &[String], value: Value) {
    let Some((last, parents)) = keys.split_last() else {
        *root = value;
        return;
    };
    let mut node = root;
    for k in parents {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(m) = node else { return };
        node = m.entry(k.clone()).or_insert(Value::Null);
    }
    if !node.is_object() {
        *node = Value::Object(Map::new());
    }
    if let Value::Object(m) = node {
        m.insert(last.clone(), value);
    }
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
    let charts: Vec<String> = DEFAULT_CHARTS.iter().map(|s| (*s).to_owned()).collect();
    let root = content(object);
    let values_file = gvk.group == "stackgate.dev" && gvk.kind == VALUES_FILE_KIND;
    // A values file's values are the file itself: name paths without the `values` prefix.
    let shown = |p: &[Seg]| {
        if values_file {
            display(p.get(1..).unwrap_or_default())
        } else {
            display(p)
        }
    };
    let mut out = Vec::new();
    let carriers = carriers(gvk, object, &charts);
    if carriers.len() > MAX_CARRIERS_PER_OBJECT {
        // Reported by the cloud-config site (`find`); reading them here would multiply the
        // per-string YAML caps.
        return out;
    }
    for c in carriers {
        let Some(raw) = get(root, &c.path) else {
            continue;
        };
        let field = shown(&c.path);
        let (values, location, field_pointer) = match c.encoding {
            Encoding::Structured => {
                let mut p = c.path.clone();
                p.push(Seg::key("controllerExtraArgs"));
                (raw.clone(), shown(&p), pointer(&p).to_string())
            }
            Encoding::YamlString => {
                let Some(text) = raw.as_str().filter(|t| t.len() <= MAX_VALUES_TEXT_BYTES) else {
                    continue;
                };
                let Ok(values) = yaml::parse_one(text).and_then(|n| n.to_json()) else {
                    continue;
                };
                (
                    values,
                    format!("{field}, controllerExtraArgs"),
                    pointer(&c.path).to_string(),
                )
            }
        };
        let Some(args) = values.get("controllerExtraArgs").and_then(extra_args) else {
            continue;
        };
        out.push((location, field_pointer, args));
    }
    out
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

/// Whether `object` carries Helm values for one of the charts the sites document asks for
/// (a GitOps object or values file whose chart reference matches). The admission decoder
/// reads `spec.values`-like subtrees only for these: every other chart's values are skipped
/// unread, which keeps the memory a review costs independent of foreign charts' values.
pub fn holds_chart_values(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &super::SitesDocument,
) -> bool {
    !carriers(gvk, object, &chart_names(sites)).is_empty()
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
    fn chart_references() {
        let c = charts();
        for r in [
            "openstack-cloud-controller-manager",
            "cpo/openstack-cloud-controller-manager",
            "./charts/openstack-cloud-controller-manager/",
            "oci://registry.example/charts/openstack-cloud-controller-manager:2.31.1",
            "https://example/openstack-cloud-controller-manager-2.31.1.tgz",
        ] {
            assert!(chart_matches(r, &c), "{r}");
        }
        for r in [
            "openstack-cinder-csi",
            "openstack-cloud-controller-manager-extra",
            "",
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
        let found = find(&gvk, &o, &charts());
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
        let edit = IniEdit {
            section: "LoadBalancer",
            key: "provider-requires-serial-api-calls",
            value: "true",
        };
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
        let found = find(&gvk, &o, &charts());
        let doc = Document::parse(found[0].text.as_ref().unwrap()).unwrap();
        let edit = IniEdit {
            section: "LoadBalancer",
            key: "provider-requires-serial-api-calls",
            value: "true",
        };
        let ops = serde_json::to_value(found[0].patch(&doc, &[edit])).unwrap();
        assert_eq!(
            ops,
            json!([{"op":"add","path":"/spec/values","value":{"cloudConfig":{"loadBalancer":{"provider-requires-serial-api-calls":true}}}}])
        );
        let (gvk, o) = obj(
            json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
            "metadata":{"name":"occm"},
            "spec":{"chart":{"spec":{"chart":"openstack-cloud-controller-manager"}},"values":{"secret":{"create":false}}}}),
        );
        assert!(find(&gvk, &o, &charts()).is_empty());
    }

    #[test]
    fn helmchart_values_content_edit_is_one_line() {
        let values = "# customer A\ncloudConfig:\n  loadBalancer:\n    subnet-id: s  # net\n  # trailing comment\ncontrollerExtraArgs: |-\n  - --concurrent-service-syncs=4\n";
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager","valuesContent": values}}));
        let found = find(&gvk, &o, &charts());
        let f = &found[0];
        assert_eq!(
            f.describe(Some(6)),
            "HelmChart kube-system/occm spec.valuesContent, cloudConfig.loadBalancer.subnet-id (line 4 of the values)"
        );
        let mut doc = Document::parse(f.text.as_ref().unwrap()).unwrap();
        let edit = IniEdit {
            section: "LoadBalancer",
            key: "provider-requires-serial-api-calls",
            value: "true",
        };
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
    fn argo_sources_values_object_and_string() {
        let (gvk, o) = obj(
            json!({"apiVersion":"argoproj.io/v1alpha1","kind":"Application",
            "metadata":{"name":"occm","namespace":"argocd"},
            "spec":{"sources":[{"repoURL":"https://x","path":"other"},
                {"chart":"openstack-cloud-controller-manager","helm":{"values":"cloudConfigContents: |\n  [Global]\n  region = r\n",
                 "valuesObject":{"cloudConfig":{"loadBalancer":{"provider-requires-serial-api-calls":false}}}}}]}}),
        );
        let found = find(&gvk, &o, &charts());
        assert_eq!(found.len(), 2);
        assert_eq!(
            found[0].location,
            "spec.sources[1].helm.valuesObject.cloudConfig"
        );
        assert_eq!(
            found[1].location,
            "spec.sources[1].helm.values, cloudConfigContents"
        );
        assert_eq!(
            found[1].describe(Some(2)),
            "Application argocd/occm spec.sources[1].helm.values, cloudConfigContents line 2 (line 3 of the values)"
        );
        assert_eq!(
            found[1].trace(Some(2)),
            Anchor::TextLine {
                path: vec![
                    Seg::key("spec"),
                    Seg::key("sources"),
                    Seg::Index(1),
                    Seg::key("helm"),
                    Seg::key("values")
                ],
                line: 3
            }
        );
    }

    #[test]
    fn unreadable_values_are_site_errors_without_content() {
        let (gvk, o) = obj(
            json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart","metadata":{"name":"x"},
            "spec":{"chart":"openstack-cloud-controller-manager","valuesContent":"a: [secret-value\n"}}),
        );
        let found = find(&gvk, &o, &charts());
        let err = found[0].text.clone().unwrap_err().to_string();
        assert!(
            err.starts_with("spec.valuesContent is not valid YAML"),
            "{err}"
        );
        assert!(!err.contains("secret-value"));
    }
}
