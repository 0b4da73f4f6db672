//! The chart's values as other rules read them: `controllerExtraArgs` (the `ccm-concurrency`
//! rule) and `ChartValues` (image, version and the CCM's other settings).

use std::borrow::Cow;

use super::overrides::{merged_with, place_overrides};
use super::places::{OverrideSource, text_values};
use super::{MAX_CARRIERS_PER_OBJECT, content, get, is_values_file};
use crate::budget::Cancel;
use crate::sites::delivery::ObjectPlaces;
use crate::sites::path::{display, pointer_text, push_pointer_token, value_at};
use crate::sites::render;
use crate::sites::values::Override;
use crate::yaml::{self, Seg};
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

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
    helm_controller_extra_args_all_in(&ObjectPlaces::new(gvk, object), &Cancel::never())
}

/// [`helm_controller_extra_args_all`] of the object whose values places `read_places` reads
/// (once for every reader of the object's values), that stops reading values once `cancel`
/// fires (what it then returns is not an answer; the caller checks the flag).
pub fn helm_controller_extra_args_all_in(
    read_places: &ObjectPlaces<'_>,
    cancel: &Cancel,
) -> Vec<(String, String, Vec<String>)> {
    let (gvk, object) = (read_places.gvk(), read_places.object());
    let charts = super::default_chart_names();
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
    let places = read_places.of(charts, cancel);
    if places.len() > MAX_CARRIERS_PER_OBJECT {
        // Reported by the cloud-config site (`find`); reading them here would multiply the
        // per-string YAML caps.
        return out;
    }
    for place in places.iter() {
        // Stop at the flag, not at the next place: what is returned is then not an answer.
        if cancel.check().is_err() {
            return Vec::new();
        }
        let raw = get(root, &place.path);
        // `--set`-like entries apply on top; one Helm cannot read is reported by the
        // cloud-config site, and nothing is claimed here.
        let Ok(overrides) = place_overrides(root, place, cancel) else {
            continue;
        };
        // A values map is read where it is (no copy); a values string is parsed.
        let values: Cow<'_, Value> = if place.yaml_string {
            match raw {
                None | Some(Value::Null) => Cow::Owned(Value::Null),
                Some(_) => match text_values(raw, place.alias.as_deref(), cancel) {
                    Some(values) => Cow::Owned(values),
                    None => continue,
                },
            }
        } else {
            raw.map_or(Cow::Owned(Value::Null), Cow::Borrowed)
        };
        // Without entries on top, the merge is the values map itself (nothing, for values
        // that are no map).
        let args = if overrides.is_empty() {
            values
                .as_object()
                .and_then(|map| map.get("controllerExtraArgs"))
                .and_then(extra_args)
        } else {
            let Ok(merged) = merged_with(&values, &overrides, cancel) else {
                continue;
            };
            merged.get("controllerExtraArgs").and_then(extra_args)
        };
        let Some(args) = args else {
            continue;
        };
        // Set by an entry on top: point at that entry.
        match overrides
            .iter()
            .rev()
            .find(|o| o.touches("controllerExtraArgs"))
        {
            Some(o) => out.push((o.name.clone(), pointer_text(&o.value_path), args)),
            None if place.yaml_string => {
                let within = place
                    .alias
                    .as_ref()
                    .map(|a| format!("{a}."))
                    .unwrap_or_default();
                let field = shown(&place.path);
                out.push((
                    format!("{field}, {within}controllerExtraArgs"),
                    pointer_text(&place.path),
                    args,
                ));
            }
            None => {
                let mut p = place.path.clone();
                p.push(Seg::key("controllerExtraArgs"));
                out.push((shown(&p), pointer_text(&p), args));
            }
        }
    }
    out
}

/// The CCM chart's values in one carrier of an object, parsed (for object families that read
/// settings other than the cloud config, e.g. `cluster.name`).
#[derive(Debug, Clone)]
pub struct ChartValues<'o> {
    /// How messages name the carrier: `spec.values`, `spec.valuesContent`, or empty for a
    /// plain values file (its values are the file).
    pub field: String,
    /// The path of the carrier from the object root (the values map or the values string).
    pub path: Vec<Seg>,
    /// The values are a YAML string (`valuesContent`, Argo `helm.values`), so a finding can
    /// only point at the string field.
    pub yaml_string: bool,
    /// The values (Null when the carrier is absent: the chart's defaults apply), with a
    /// RKE2/k3s HelmChart's `spec.set` entries applied as Helm applies `--set`. Borrowed
    /// from the object when it holds them as they are (a values map with nothing on top).
    pub values: Cow<'o, Value>,
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

impl ChartValues<'_> {
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
        // `{field}, ` or `{field}.`, then `{within}.`, then the key, written in one string.
        let mut out = String::with_capacity(self.field.len() + key.len() + 48);
        if !self.field.is_empty() {
            out.push_str(&self.field);
            out.push_str(if self.yaml_string { ", " } else { "." });
        }
        if let Some(within) = &self.within {
            out.push_str(within);
            out.push('.');
        }
        out.push_str(key);
        out
    }

    /// JSON pointer of `key` (values path segments) in the object: inside a values map, or
    /// the values string field itself.
    pub fn pointer(&self, key: &[&str]) -> String {
        let mut pointer = pointer_text(&self.path);
        if !self.yaml_string {
            for k in key {
                push_pointer_token(&mut pointer, k);
            }
        }
        pointer
    }
}

/// Every carrier of the CCM chart's values in `object`, parsed. A values string that cannot
/// be read (not YAML, over [`MAX_VALUES_TEXT_BYTES`](super::MAX_VALUES_TEXT_BYTES)) is left out: the cloud-config site
/// reports it. None at all past [`MAX_CARRIERS_PER_OBJECT`] (reported the same way).
pub fn chart_values_all<'o>(
    gvk: &'o GroupVersionKind,
    object: &'o DynamicObject,
) -> Vec<ChartValues<'o>> {
    chart_values_all_in(&ObjectPlaces::new(gvk, object), &Cancel::never())
}

/// [`chart_values_all`] of the object whose values places `read_places` reads (once for
/// every reader of the object's values), that stops reading values once `cancel` fires (what
/// it then returns is not an answer; the caller checks the flag).
pub fn chart_values_all_in<'o>(
    read_places: &ObjectPlaces<'o>,
    cancel: &Cancel,
) -> Vec<ChartValues<'o>> {
    let (gvk, object) = (read_places.gvk(), read_places.object());
    let charts = super::default_chart_names();
    let root = content(object);
    let values_file = is_values_file(gvk);
    let places = read_places.of(charts, cancel);
    if places.len() > MAX_CARRIERS_PER_OBJECT {
        return Vec::new();
    }
    let mut out = Vec::new();
    for place in places.iter() {
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
        // A values map is read where it is (no copy); a values string is parsed.
        let values: Cow<'o, Value> = if place.yaml_string {
            match raw {
                None | Some(Value::Null) => Cow::Owned(Value::Null),
                Some(_) => match text_values(raw, place.alias.as_deref(), cancel) {
                    Some(values) => Cow::Owned(values),
                    None => continue,
                },
            }
        } else {
            raw.map_or(Cow::Owned(Value::Null), Cow::Borrowed)
        };
        // RKE2/k3s `spec.set` entries apply on top (Argo CD parameters are handed over as
        // `parameters`); entries Helm cannot read are reported by the cloud-config site.
        let mut set_entries = Vec::new();
        let values = match &place.overrides {
            Some(OverrideSource::HelmChartSet(_)) => {
                let Ok(overrides) = place_overrides(root, place, cancel) else {
                    continue;
                };
                set_entries = overrides.iter().map(set_entry).collect();
                if overrides.is_empty() {
                    values
                } else {
                    match merged_with(&values, &overrides, cancel) {
                        Ok(merged) => Cow::Owned(merged),
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
            path: place.path.clone(),
            yaml_string: place.yaml_string,
            values,
            merged_from,
            parameters,
            overlay,
            overridable,
            within: place.alias.clone().filter(|_| place.yaml_string),
            set_entries,
        });
    }
    out
}

/// What [`ChartValues::set_entries`] keeps of an override: names and paths, never the value.
fn set_entry(o: &Override) -> SetEntry {
    SetEntry {
        name: o.name.clone(),
        pointer: pointer_text(&o.value_path),
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
            let from = value_at(root, "/spec/valuesFrom");
            let files = value_at(root, "/spec/chart/spec/valuesFiles");
            let file = value_at(root, "/spec/chart/spec/valuesFile")
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

/// The items of `text` when it is a YAML block list of flags in the plainest form, one
/// `- --name=value` per line at the first column (blank lines allowed), each item of letters,
/// digits and `-_=.,/+` only: what the chart's own example and most values write. Such an
/// item is a plain scalar that YAML reads as the string it spells (a leading `--` is no
/// number, boolean or null), so this is what parsing the text as YAML gives, without paying
/// for a YAML parser on every review (`tests::plain_flag_lists_read_as_yaml_reads_them`);
/// None for anything else, which is then parsed.
fn plain_flag_list(text: &str) -> Option<Vec<String>> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-_=.,/+".contains(&b);
    let mut items = Vec::new();
    for line in text.split('\n') {
        if line.is_empty() {
            continue;
        }
        let item = line.strip_prefix("- ")?;
        if !item.starts_with("--") || !item.bytes().all(plain) {
            return None;
        }
        items.push(item.to_owned());
    }
    (!items.is_empty()).then_some(items)
}

/// The arguments of a `controllerExtraArgs` value: a YAML list written as a string (what the
/// chart expects, e.g. `"- --concurrent-service-syncs=2\n"`) or an actual list.
fn extra_args(value: &Value) -> Option<Vec<String>> {
    let list = match value {
        Value::String(s) if let Some(flags) = plain_flag_list(s) => return Some(flags),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// How a carrier names a values key, and its pointer: in a values map, a values string, a
    /// values file, under an umbrella's subchart key; keys a pointer escapes.
    #[test]
    fn chart_values_name_and_point_at_their_keys() {
        let carrier =
            |field: &str, path: &[&str], yaml_string: bool, within: Option<&str>| ChartValues {
                field: field.to_owned(),
                path: crate::sites::helm::keys(path),
                yaml_string,
                values: Cow::Owned(Value::Null),
                merged_from: None,
                parameters: Vec::new(),
                overlay: false,
                overridable: false,
                within: within.map(str::to_owned),
                set_entries: Vec::new(),
            };
        let map = carrier("spec.values", &["spec", "values"], false, None);
        assert_eq!(map.describe("cluster.name"), "spec.values.cluster.name");
        assert_eq!(
            map.pointer(&["cluster", "name"]),
            "/spec/values/cluster/name"
        );
        assert_eq!(map.pointer(&["a/b", "c~d"]), "/spec/values/a~1b/c~0d");
        let text = carrier("spec.valuesContent", &["spec", "valuesContent"], true, None);
        assert_eq!(
            text.describe("cluster.name"),
            "spec.valuesContent, cluster.name"
        );
        assert_eq!(text.pointer(&["cluster", "name"]), "/spec/valuesContent");
        let umbrella = carrier(
            "spec.valuesContent",
            &["spec", "valuesContent"],
            true,
            Some("ccm"),
        );
        assert_eq!(
            umbrella.describe("cluster.name"),
            "spec.valuesContent, ccm.cluster.name"
        );
        let file = carrier("", &["values"], false, None);
        assert_eq!(file.describe("cluster.name"), "cluster.name");
        assert_eq!(file.pointer(&[]), "/values");
        let file_under = carrier("", &["values"], true, Some("ccm"));
        assert_eq!(file_under.describe("x"), "ccm.x");
    }

    /// Every text of up to three lines from a pool of plain, almost plain and not plain flag
    /// lines: where the shortcut answers, YAML gives the same list of strings; the plain
    /// texts are answered by it.
    #[test]
    fn plain_flag_lists_read_as_yaml_reads_them() {
        let pool = [
            "- --concurrent-service-syncs=2",
            "- --a=1",
            "",
            "- --x=a,b",
            "- --v=2.5",
            "- --p=/etc/x_y",
            "- --a+b",
            " - --indented",
            "- --c: d",
            "- --c:d",
            "- --h # c",
            "- '--q'",
            "-\t--t",
            "- --u=\u{e9}",
            "- --k=v\r",
            "- -x",
            "---",
            "- --",
            "- --a=yes",
            "-  --two",
            "- --x=[1]",
            "- --x=*a",
        ];
        let mut answered = 0;
        for a in pool {
            for b in pool {
                for c in pool {
                    for end in ["", "\n"] {
                        let text = format!("{a}\n{b}\n{c}{end}");
                        let Some(items) = plain_flag_list(&text) else {
                            continue;
                        };
                        answered += 1;
                        let parsed = yaml::parse_one(&text).and_then(|n| n.to_json());
                        let expected: Vec<Value> =
                            items.iter().cloned().map(Value::String).collect();
                        assert_eq!(parsed.ok(), Some(Value::Array(expected)), "{text:?}");
                    }
                }
            }
        }
        assert!(answered > 1000, "{answered}");
        assert_eq!(
            plain_flag_list("- --concurrent-service-syncs=2\n- --v=2\n"),
            Some(vec![
                "--concurrent-service-syncs=2".to_owned(),
                "--v=2".to_owned()
            ])
        );
        for not_plain in [
            "",
            "\n",
            "- --c: d",
            "- '--q'",
            " - --x",
            "- x",
            "- --a=\u{e9}",
        ] {
            assert_eq!(plain_flag_list(not_plain), None, "{not_plain:?}");
        }
    }
}
