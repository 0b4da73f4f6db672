//! Carriers inside the `openstack-cloud-controller-manager` chart's values (found by
//! [`super::helm`]):
//!
//! * [`RenderedValues`]: `cloudConfig` in structured values (a map in the object), rendered to
//!   INI ([`super::render`]); edits become JSON Patch `add`s of the edited keys.
//! * [`ValuesTextRendered`] and [`ValuesTextContents`]: `cloudConfig` or `cloudConfigContents`
//!   in a YAML values string (`valuesContent`, Argo `helm.values`); edits change one line of
//!   the string where they can ([`crate::yaml::edit`], verified), and the field is replaced.
//!
//! `cloudConfigContents` in structured values is a plain string field of the object
//! ([`super::object_data::TextField`]).

use std::collections::HashMap;
use std::sync::OnceLock;

use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use serde_json::{Map, Value};

use super::path::{self, pointer, pointer_text};
use super::render::{self, Origin};
use super::strvals::Typing;
use super::{Anchor, Carrier, Holder, Location};
use crate::cloudconf::{Document, IniEdit};
use crate::yaml::edit::{self as yamledit, Change};
use crate::yaml::{self, Node, Seg};

/// Where chart values are in the object.
#[derive(Debug, Clone)]
pub(super) struct ValuesAt {
    /// Path of the values map or of the values string, from the object root.
    pub(super) path: Vec<Seg>,
    /// How many leading segments of `path` exist as mappings in the object (== len when the
    /// values themselves exist): an edit creates the rest.
    pub(super) existing: usize,
    /// How messages name a path inside the values, as a prefix: `spec.values.`,
    /// `spec.valuesContent, `, or empty for a values file (the values are the file).
    pub(super) prefix: String,
}

impl ValuesAt {
    /// Whether the values map or string exists in the object.
    fn exists(&self) -> bool {
        self.existing == self.path.len()
    }

    /// `spec.values.cloudConfig`, `spec.valuesContent, cloudConfigContents`.
    pub(super) fn name(&self, inner: &str) -> String {
        let mut name = String::with_capacity(self.prefix.len() + inner.len());
        name.push_str(&self.prefix);
        name.push_str(inner);
        name
    }

    /// The field the values are in, as a finding's first line names it, and the rest of the
    /// prefix: `("spec.valuesContent", "ccm.")` for an umbrella's values string,
    /// `("spec.values", "")`, `("", "")` for a values file (the values are the file).
    fn field_and_rest(&self) -> (&str, &str) {
        match self.prefix.split_once(", ") {
            Some((field, rest)) => (field, rest),
            None => (self.prefix.trim_end_matches('.'), ""),
        }
    }

    /// An `add` of `value` at the values' path, starting at the first segment missing from
    /// the object.
    fn add_missing(&self, value: Value) -> PatchOperation {
        let existing = self.existing.min(self.path.len());
        let tail: Vec<String> = self.path[existing..]
            .iter()
            .filter_map(|s| match s {
                Seg::Key(k) => Some(k.clone()),
                Seg::Index(_) => None,
            })
            .collect();
        let mut path = self.path[..existing].to_vec();
        let rest = match tail.split_first() {
            Some((first, rest)) => {
                path.push(Seg::key(first));
                rest
            }
            None => &[],
        };
        PatchOperation::Add(AddOperation {
            path: pointer(&path),
            value: nest(rest, value),
        })
    }
}

/// `cloudConfig` in structured values, rendered to INI.
#[derive(Debug)]
pub(super) struct RenderedValues {
    /// The values map.
    pub(super) at: ValuesAt,
    /// The values (null when absent).
    pub(super) values: Value,
    /// The origin of each rendered line (empty when the chart cannot render it).
    pub(super) origins: Vec<Origin>,
}

impl RenderedValues {
    /// [`Carrier::patch`] over `values`, what the edits read of the values as they are
    /// ([`edited_part`], or all of them).
    fn patch_over(&self, mut values: Value, edits: &[IniEdit]) -> Vec<PatchOperation> {
        let mut ops = Vec::new();
        let mut values_exist = self.at.exists() && self.values.is_object();
        for edit in edits {
            let Some((rel, leaf)) = edit_target(&values, edit) else {
                continue;
            };
            if !values_exist {
                let nested = nest(&rel, leaf);
                ops.push(self.at.add_missing(nested.clone()));
                values = nested;
                values_exist = true;
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
            let mut path = self.at.path.clone();
            path.extend(rel[..=split].iter().map(|k| Seg::key(k)));
            ops.push(PatchOperation::Add(AddOperation {
                path: pointer(&path),
                value: value.clone(),
            }));
            json_put(&mut values, &rel[..=split], value);
        }
        ops
    }
}

impl Carrier for RenderedValues {
    /// `add` operations that set each edited key in the structured values, creating the
    /// missing parents (`cloudConfig`, the section, or the values themselves).
    fn patch(&self, _edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation> {
        self.patch_over(edited_part(&self.values, edits), edits)
    }

    fn trace(&self, line: Option<usize>) -> Anchor {
        let mut path = self.at.path.clone();
        path.extend(
            rendered_path(&self.origins, line)
                .iter()
                .map(|k| Seg::key(k)),
        );
        Anchor::Node(path)
    }

    fn pointer(&self) -> String {
        // `cloudConfig` holds nothing a pointer escapes.
        let mut pointer = pointer_text(&self.at.path);
        pointer.push_str("/cloudConfig");
        pointer
    }

    fn describe(&self, line: Option<usize>) -> String {
        rendered_name(&self.at.prefix, &self.origins, line)
    }

    /// The values field (`spec.values`, `spec.source.helm.valuesObject`) on the first line,
    /// the values path after it: below an umbrella's subchart key, from that key (the message
    /// names the INI key; the path says where it is written).
    fn locate(&self, line: Option<usize>) -> Location {
        let full = rendered_name(&self.at.prefix, &self.origins, line);
        let field_end = self
            .at
            .path
            .iter()
            .rposition(|s| matches!(s, Seg::Key(k) if k == "values" || k == "valuesObject"))
            .filter(|&i| i > 0);
        if let Some(end) = field_end {
            let field = path::display(&self.at.path[..=end]);
            if let Some(rest) = full
                .strip_prefix(field.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
            {
                // `within`, with the short field found once.
                let (at, within) = match short_field(&self.at.path[..=end]) {
                    Some(short) => (short, format!("{field}, {rest}")),
                    None => (field.clone(), rest.to_owned()),
                };
                return Location {
                    at,
                    field_line: None,
                    within: Some(within),
                };
            }
        }
        // A values file: the values are the file, which the object names.
        Location {
            at: String::new(),
            field_line: None,
            within: Some(full),
        }
    }

    fn holder(&self) -> Holder {
        Holder::HelmValues
    }

    fn writes_lines_of_a_value(&self) -> bool {
        one_value_on_two_lines(&self.origins)
    }
}

/// The part of `values` that [`RenderedValues::patch`] reads and writes for `edits`, copied:
/// of a values map, `cloudConfig` (a map, or null for anything else) with only the sections
/// the edits set; nothing (null) of values that are no map, which the first edit replaces.
/// Each edit reads and writes `cloudConfig.<section>` alone, so the rest need not be copied.
fn edited_part(values: &Value, edits: &[IniEdit]) -> Value {
    let Some(map) = values.as_object() else {
        return Value::Null;
    };
    let mut part = Map::new();
    match map.get("cloudConfig") {
        None => {}
        Some(Value::Object(config)) => {
            let mut sections = Map::new();
            for section in edits.iter().filter_map(|e| render::values_key(e.section)) {
                if let Some(value) = config.get(section)
                    && !sections.contains_key(section)
                {
                    sections.insert(section.to_owned(), value.clone());
                }
            }
            part.insert("cloudConfig".to_owned(), Value::Object(sections));
        }
        Some(_) => {
            part.insert("cloudConfig".to_owned(), Value::Null);
        }
    }
    Value::Object(part)
}

/// Whether two consecutive rendered lines come from one key: a value written unquoted with a
/// line break in it (keys of a section are distinct, so nothing else does that).
fn one_value_on_two_lines(origins: &[Origin]) -> bool {
    origins
        .windows(2)
        .any(|w| w[0] == w[1] && matches!(w[0], Origin::Key(..)))
}

/// A YAML values string: what the two carriers inside one share.
#[derive(Debug)]
pub(super) struct ValuesText {
    /// The string field.
    pub(super) at: ValuesAt,
    /// The values text.
    pub(super) yaml: String,
    /// The values (null when unreadable): below `within` when that is set.
    pub(super) values: Value,
    /// The key of the CCM chart's values inside the text when the text holds an umbrella
    /// chart's values (`openstack-cloud-controller-manager:`); empty for the chart's own.
    within: Vec<Seg>,
    /// The text parsed with positions, read once on first use: every finding's message and
    /// location asks for it, and parsing per finding was quadratic.
    tree: OnceLock<Option<Node>>,
    /// Write only minimal verified edits: where one is impossible, write nothing instead of
    /// the whole values as JSON (a labelled values Secret is someone's source file).
    minimal_only: bool,
}

impl ValuesText {
    /// The values string `yaml` at `at`, whose values are `values`.
    pub(super) fn new(at: ValuesAt, yaml: String, values: Value) -> Self {
        ValuesText {
            at,
            yaml,
            values,
            within: Vec::new(),
            tree: OnceLock::new(),
            minimal_only: false,
        }
    }

    /// The same values string, written only by minimal verified edits (see `write`).
    pub(super) fn minimal_only(mut self) -> Self {
        self.minimal_only = true;
        self
    }

    /// The same text, whose CCM chart values (`values`) are under the subchart key `key`.
    pub(super) fn under(mut self, key: &str) -> Self {
        self.within = vec![Seg::key(key)];
        self
    }

    /// `path` (inside the CCM chart's values) from the root of the text.
    fn rooted(&self, path: &[Seg]) -> Vec<Seg> {
        let mut out = self.within.clone();
        out.extend_from_slice(path);
        out
    }

    /// The parsed text, or `None` when it is not valid YAML.
    fn tree(&self) -> Option<&Node> {
        self.tree
            .get_or_init(|| yaml::parse_one(&self.yaml).ok())
            .as_ref()
    }

    /// `line` of the values text, or the whole string when it is not known.
    fn trace(&self, values_line: Option<usize>) -> Anchor {
        match values_line {
            Some(line) => Anchor::TextLine {
                path: self.at.path.clone(),
                line,
            },
            None => Anchor::Node(self.at.path.clone()),
        }
    }

    /// Where `inner` (a place inside the CCM chart's values) is, at `values_line` of the text:
    /// the field and the line on a finding's first line, the place after it.
    fn locate(&self, values_line: Option<usize>, inner: String) -> Location {
        let (field, rest) = self.at.field_and_rest();
        let place = format!("{rest}{inner}");
        if field.is_empty() {
            // A values file: the values are the file, which the object names.
            return Location {
                at: String::new(),
                field_line: values_line,
                within: Some(place),
            };
        }
        Location {
            at: short_field(&self.at.path).unwrap_or_else(|| field.to_owned()),
            field_line: values_line,
            within: Some(within(field, &self.at.path, &place)),
        }
    }

    /// `message` and, when known, the line of the values text.
    fn with_values_line(mut message: String, values_line: Option<usize>) -> String {
        if let Some(line) = values_line {
            message.push_str(&format!(" (line {line} of the values)"));
        }
        message
    }

    /// The operation that writes the values text with `changes` applied: one line changed or
    /// inserted per change where the text allows it, else the whole values written as JSON
    /// (valid YAML) — or, with `minimal_only`, no operation at all.
    fn write(&self, changes: &[Change]) -> Vec<PatchOperation> {
        let new_text = match self.edit_minimal(changes) {
            Some(edited) => edited,
            None if self.minimal_only => return Vec::new(),
            None => self.rewrite_as_json(changes),
        };
        if self.at.exists() {
            vec![PatchOperation::Replace(ReplaceOperation {
                path: pointer(&self.at.path),
                value: Value::String(new_text),
            })]
        } else {
            vec![self.at.add_missing(Value::String(new_text))]
        }
    }

    /// The values text with `changes` applied as minimal verified edits, or None when one
    /// cannot be.
    fn edit_minimal(&self, changes: &[Change]) -> Option<String> {
        let mut current = self.yaml.clone();
        for change in &self.rooted_changes(changes) {
            current = yamledit::apply(&current, 0, change).ok()?;
        }
        Some(current)
    }

    /// `changes` (paths inside the CCM chart's values) with paths from the root of the text.
    fn rooted_changes(&self, changes: &[Change]) -> Vec<Change> {
        changes
            .iter()
            .map(|change| {
                let Change::Set { path, value } = change;
                Change::Set {
                    path: self.rooted(path),
                    value: value.clone(),
                }
            })
            .collect()
    }

    /// The whole values with `changes` applied, as JSON (which Helm reads as YAML): the
    /// fallback when the text cannot be edited minimally (under an umbrella chart, the whole
    /// text's values).
    fn rewrite_as_json(&self, changes: &[Change]) -> String {
        let mut values = if self.within.is_empty() {
            self.values.clone()
        } else {
            match yaml::parse_one(&self.yaml).and_then(|n| n.to_json()) {
                Ok(whole) => whole,
                Err(_) => return self.yaml.clone(),
            }
        };
        for change in &self.rooted_changes(changes) {
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
            .unwrap_or_else(|_| self.yaml.clone())
    }
}

/// `cloudConfig` in a YAML values string, rendered to INI.
#[derive(Debug)]
pub(super) struct ValuesTextRendered {
    /// The values string.
    pub(super) text: ValuesText,
    /// The origin of each rendered line (empty when the chart cannot render it).
    pub(super) origins: Vec<Origin>,
}

impl ValuesTextRendered {
    /// The line of the values text that `line` of the cloud config comes from: the deepest
    /// key of its values path that the text has.
    fn values_line(&self, line: Option<usize>) -> Option<usize> {
        let root = self.text.tree()?;
        let path: Vec<Seg> = rendered_path(&self.origins, line)
            .iter()
            .map(|k| Seg::key(k))
            .collect();
        let (used, _, key_line) = root.deepest(&self.text.rooted(&path));
        (used > 0).then_some(key_line)
    }
}

impl Carrier for ValuesTextRendered {
    fn patch(&self, _edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation> {
        let mut values = self.text.values.clone();
        let mut changes = Vec::new();
        for edit in edits {
            if let Some((rel, leaf)) = edit_target(&values, edit) {
                json_put(&mut values, &rel, leaf.clone());
                changes.push(Change::Set {
                    path: rel.iter().map(|k| Seg::key(k)).collect(),
                    value: leaf,
                });
            }
        }
        self.text.write(&changes)
    }

    fn trace(&self, line: Option<usize>) -> Anchor {
        self.text.trace(self.values_line(line))
    }

    fn pointer(&self) -> String {
        pointer_text(&self.text.at.path)
    }

    fn describe(&self, line: Option<usize>) -> String {
        let inner = rendered_path(&self.origins, line).join(".");
        ValuesText::with_values_line(self.text.at.name(&inner), self.values_line(line))
    }

    /// The values string and its line on the first line, the values path after it.
    fn locate(&self, line: Option<usize>) -> Location {
        let inner = rendered_path(&self.origins, line).join(".");
        self.text.locate(self.values_line(line), inner)
    }

    fn holder(&self) -> Holder {
        Holder::HelmValues
    }

    fn writes_lines_of_a_value(&self) -> bool {
        one_value_on_two_lines(&self.origins)
    }
}

/// `cloudConfigContents` (raw INI) in a YAML values string.
#[derive(Debug)]
pub(super) struct ValuesTextContents {
    /// The values string (its values null when it is not valid YAML).
    pub(super) text: ValuesText,
}

impl ValuesTextContents {
    /// The line of the values text that holds `line` of the cloud config (its first line
    /// for `None`).
    fn values_line(&self, line: Option<usize>) -> Option<usize> {
        let root = self.text.tree()?;
        let node = root.at(&self.text.rooted(&[Seg::key("cloudConfigContents")]))?;
        Some(yaml::line_within_scalar(
            &self.text.yaml,
            node,
            line.unwrap_or(1),
        ))
    }
}

impl Carrier for ValuesTextContents {
    fn patch(&self, edited: &Document, _edits: &[IniEdit]) -> Vec<PatchOperation> {
        self.text.write(&[Change::Set {
            path: vec![Seg::key("cloudConfigContents")],
            value: Value::String(edited.to_text()),
        }])
    }

    fn trace(&self, line: Option<usize>) -> Anchor {
        self.text.trace(self.values_line(line))
    }

    fn pointer(&self) -> String {
        pointer_text(&self.text.at.path)
    }

    fn describe(&self, line: Option<usize>) -> String {
        let mut message = self.text.at.name("cloudConfigContents");
        if let Some(line) = line {
            message.push_str(&format!(" line {line}"));
        }
        ValuesText::with_values_line(message, self.values_line(line))
    }

    /// The values string and its line on the first line, the line of `cloudConfigContents`
    /// after it.
    fn locate(&self, line: Option<usize>) -> Location {
        let mut inner = "cloudConfigContents".to_owned();
        if let Some(line) = line {
            inner.push_str(&format!(" line {line}"));
        }
        self.text.locate(self.values_line(line), inner)
    }

    fn holder(&self) -> Holder {
        Holder::HelmValues
    }
}

/// How a finding's first line names the field at `path` when it goes through a list item:
/// from that item on (`charts[0].values` for a k0s ClusterConfig's
/// `spec.k0sConfigSpec.k0s.spec.extensions.helm.charts[0].values`); the whole field follows the
/// first line ([`within`]). None: the field is named whole.
fn short_field(path: &[Seg]) -> Option<String> {
    let start = path
        .iter()
        .rposition(|s| matches!(s, Seg::Index(_)))
        .and_then(|i| i.checked_sub(1))
        .filter(|&k| k > 0 && matches!(path[k], Seg::Key(_)))?;
    Some(path::display(&path[start..]))
}

/// The place a finding's first line leaves out: `place` inside the field, with the whole
/// `field` named first when [`short_field`] shortens it.
fn within(field: &str, path: &[Seg], place: &str) -> String {
    match short_field(path) {
        Some(_) => format!("{field}, {place}"),
        None => place.to_owned(),
    }
}

/// The values path (inside the values) that line `line` of a rendered cloud config comes
/// from: the key, the section, or `cloudConfig` for the whole config.
fn rendered_path(origins: &[Origin], line: Option<usize>) -> Vec<String> {
    match origin_of(origins, line) {
        Some(Origin::Key(section, key)) => {
            vec![
                "cloudConfig".into(),
                (*section).into(),
                shown_key(key).to_owned(),
            ]
        }
        Some(Origin::Section(section)) => vec!["cloudConfig".into(), (*section).into()],
        None => vec!["cloudConfig".to_owned()],
    }
}

/// [`rendered_path`] joined by `.` after `prefix` (how messages name it), written in one
/// string.
fn rendered_name(prefix: &str, origins: &[Origin], line: Option<usize>) -> String {
    let mut out = String::with_capacity(prefix.len() + 64);
    out.push_str(prefix);
    out.push_str("cloudConfig");
    match origin_of(origins, line) {
        Some(Origin::Key(section, key)) => {
            out.push('.');
            out.push_str(section);
            out.push('.');
            out.push_str(shown_key(key));
        }
        Some(Origin::Section(section)) => {
            out.push('.');
            out.push_str(section);
        }
        None => {}
    }
    out
}

/// The origin of line `line` (1-based) of a rendered cloud config.
fn origin_of(origins: &[Origin], line: Option<usize>) -> Option<&Origin> {
    line.and_then(|l| l.checked_sub(1))
        .and_then(|i| origins.get(i))
}

/// How a path names a rendered key: a key the CCM does not know may be a value typed in the
/// wrong place, so it is named only when known or a plausible typo (invariant 5).
fn shown_key(key: &str) -> &str {
    if crate::cloudconf::schema::is_displayable_key(key) {
        key
    } else {
        "<unknown key, name not shown>"
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

/// Values that come from places the object only names (a Flux HelmRelease's
/// `spec.valuesFrom`, an Argo CD source's `helm.valueFiles`) and stackgate cannot see: nothing
/// is rendered or edited; findings point at the references.
#[derive(Debug)]
pub(super) struct UnseenValues {
    /// Path of the references (`spec.valuesFrom`, `spec.source.helm.valueFiles`).
    pub(super) path: Vec<Seg>,
}

impl Carrier for UnseenValues {
    /// Nothing: what the chart renders is not known, so nothing can be edited.
    fn patch(&self, _edited: &Document, _edits: &[IniEdit]) -> Vec<PatchOperation> {
        Vec::new()
    }

    fn trace(&self, _line: Option<usize>) -> Anchor {
        Anchor::Node(self.path.clone())
    }

    fn pointer(&self) -> String {
        pointer_text(&self.path)
    }

    fn describe(&self, _line: Option<usize>) -> String {
        path::display(&self.path)
    }

    fn holder(&self) -> Holder {
        Holder::HelmValues
    }
}

/// One entry of a Helm `--set`-like field set on top of the chart's values: RKE2/k3s
/// HelmChart `spec.set` entries, Argo CD `helm.parameters`.
#[derive(Debug, Clone)]
pub(super) struct Override {
    /// The `--set` text Helm parses (`key=value`, commas escaped as the controller escapes
    /// them), as written: below an umbrella chart's subchart key, still with it (see `scope`).
    pub(super) line: String,
    /// Below an umbrella chart, the subchart key: Helm parses the whole line at the
    /// umbrella's root (every assignment in it, a hidden `<sub>.a=1,<sub>.b=2` too) and the
    /// subchart gets what lands under this key. `None`: the line is parsed at the chart's root.
    pub(super) scope: Option<String>,
    /// `--set` or `--set-string`.
    pub(super) typing: Typing,
    /// The values paths it sets (`[cloudConfig, loadBalancer, subnet-id]`; list indexes
    /// included), in Helm's parse order.
    pub(super) paths: Vec<Vec<Seg>>,
    /// Path of the string that holds the value in the object (`spec.set.<key>`,
    /// `spec.source.helm.parameters[0].value`).
    pub(super) value_path: Vec<Seg>,
    /// How messages name it: `spec.set["cloudConfig.loadBalancer.subnet-id"]`.
    pub(super) name: String,
}

impl Override {
    /// The one values path it sets, when that is made of keys only, as [`Overridden`] looks
    /// it up (the last key, a cloud-config key gcfg matches without regard to case, in ASCII
    /// lowercase).
    fn only_keys(&self) -> Option<Vec<String>> {
        let [path] = self.paths.as_slice() else {
            return None;
        };
        let keys: Option<Vec<String>> = path
            .iter()
            .map(|seg| match seg {
                Seg::Key(k) => Some(k.clone()),
                Seg::Index(_) => None,
            })
            .collect();
        keys.map(|keys| lookup_key(&keys))
    }

    /// Whether it sets anything at or below the top-level values key `key`.
    pub(super) fn touches(&self, key: &str) -> bool {
        self.paths
            .iter()
            .any(|p| matches!(p.first(), Some(Seg::Key(k)) if k == key))
    }
}

/// A rendered `cloudConfig` whose values are overridden by `--set`-like entries: a line that
/// comes from an override is located at it, and an edit of an overridden key is written
/// there (an edit of the values beneath would be overridden again); everything else goes to
/// the carrier of the values.
#[derive(Debug)]
pub(super) struct Overridden {
    /// The carrier of the values beneath (its origins are those of the merged values).
    inner: Box<dyn Carrier>,
    /// The origin of each line rendered from the merged values.
    origins: Vec<Origin>,
    /// The overrides, in the order they apply.
    overrides: Vec<Override>,
    /// The last override that sets exactly one values path of keys, by that path (its last
    /// key in ASCII lowercase, as gcfg matches key names), built on first use: looking each
    /// rendered line up by scanning every override was quadratic.
    by_path: OnceLock<HashMap<Vec<String>, usize>>,
}

impl Overridden {
    /// `inner`'s values with `overrides` on top, rendered with `origins`.
    pub(super) fn new(
        inner: Box<dyn Carrier>,
        origins: Vec<Origin>,
        overrides: Vec<Override>,
    ) -> Self {
        Overridden {
            inner,
            origins,
            overrides,
            by_path: OnceLock::new(),
        }
    }

    /// The last override that sets the values path of `line` (gcfg matches key names
    /// without regard to case).
    fn override_of(&self, line: Option<usize>) -> Option<&Override> {
        let path = rendered_path(&self.origins, line);
        self.find(&path)
    }

    fn find(&self, path: &[String]) -> Option<&Override> {
        let index = self.by_path.get_or_init(|| {
            let mut index = HashMap::new();
            for (i, o) in self.overrides.iter().enumerate() {
                if let Some(key) = o.only_keys() {
                    index.insert(key, i);
                }
            }
            index
        });
        index
            .get(&lookup_key(path))
            .and_then(|&i| self.overrides.get(i))
    }
}

/// A values path as [`Overridden`] indexes it: the last key in ASCII lowercase.
fn lookup_key(path: &[String]) -> Vec<String> {
    let mut key = path.to_vec();
    if let Some(last) = key.last_mut() {
        *last = last.to_ascii_lowercase();
    }
    key
}

impl Carrier for Overridden {
    fn patch(&self, edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation> {
        let mut ops = Vec::new();
        let mut beneath = Vec::new();
        for edit in edits {
            let target = render::values_key(edit.section).map(|section| {
                vec![
                    "cloudConfig".to_owned(),
                    section.to_owned(),
                    edit.key.to_owned(),
                ]
            });
            match target.as_deref().and_then(|t| self.find(t)) {
                // Helm types a `--set` "true"/"false" as a boolean; the field holds a string.
                Some(o) => ops.push(PatchOperation::Replace(ReplaceOperation {
                    path: pointer(&o.value_path),
                    value: Value::String(edit.value.to_owned()),
                })),
                None => beneath.push(edit.clone()),
            }
        }
        if !beneath.is_empty() {
            ops.extend(self.inner.patch(edited, &beneath));
        }
        ops
    }

    fn trace(&self, line: Option<usize>) -> Anchor {
        match self.override_of(line) {
            Some(o) => Anchor::Node(o.value_path.clone()),
            None => self.inner.trace(line),
        }
    }

    fn pointer(&self) -> String {
        self.inner.pointer()
    }

    fn describe(&self, line: Option<usize>) -> String {
        match self.override_of(line) {
            Some(o) => o.name.clone(),
            None => self.inner.describe(line),
        }
    }

    /// An override's field on the first line (`spec.set`, `spec.source.helm.parameters[0]`),
    /// the entry after it (`spec.set["cloudConfig.loadBalancer.subnet-id"]`).
    fn locate(&self, line: Option<usize>) -> Location {
        match self.override_of(line) {
            Some(o) => Location {
                at: path::display(&o.value_path[..o.value_path.len().saturating_sub(1)]),
                field_line: None,
                within: Some(o.name.clone()),
            },
            None => self.inner.locate(line),
        }
    }

    fn holder(&self) -> Holder {
        Holder::HelmValues
    }

    fn writes_lines_of_a_value(&self) -> bool {
        one_value_on_two_lines(&self.origins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A rendered line's name is its path joined after the prefix: for a key (known, and one
    /// not shown), a section, no line, line 0 and a line past the end.
    #[test]
    fn rendered_names_are_rendered_paths_joined() {
        let origins = vec![
            Origin::Section("global"),
            Origin::Key("global", "region".to_owned()),
            Origin::Key("global", "p4ssw0rd-value".to_owned()),
            Origin::Section("global"),
            Origin::Section("loadBalancer"),
        ];
        for prefix in ["", "spec.values.", "spec.valuesContent, ccm."] {
            for line in [None, Some(0), Some(1), Some(2), Some(3), Some(5), Some(6)] {
                assert_eq!(
                    rendered_name(prefix, &origins, line),
                    format!("{prefix}{}", rendered_path(&origins, line).join(".")),
                    "{prefix:?} {line:?}"
                );
            }
        }
        assert_eq!(
            rendered_name("spec.values.", &origins, Some(2)),
            "spec.values.cloudConfig.global.region"
        );
        assert_eq!(
            rendered_name("", &origins, Some(3)),
            "cloudConfig.global.<unknown key, name not shown>"
        );
    }

    /// Values that exist as a map get each edited key added where it is missing; values that
    /// are missing, or exist but are no map, are written whole at their path by the first
    /// edit.
    #[test]
    fn a_patch_adds_keys_to_a_values_map_and_writes_other_values_whole() {
        let serial = IniEdit {
            section: "LoadBalancer",
            key: "provider-requires-serial-api-calls",
            value: "true",
        };
        let carrier = |values: Value, existing: usize| RenderedValues {
            at: ValuesAt {
                path: vec![Seg::key("spec"), Seg::key("values")],
                existing,
                prefix: "spec.values.".to_owned(),
            },
            values,
            origins: Vec::new(),
        };
        let ops = |values: Value, existing: usize| {
            let ops =
                carrier(values, existing).patch_over(Value::Null, std::slice::from_ref(&serial));
            serde_json::to_value(&ops).expect("operations are JSON")
        };
        let whole = json!([{"op": "add", "path": "/spec/values", "value":
            {"cloudConfig": {"loadBalancer": {"provider-requires-serial-api-calls": true}}}}]);
        // A string where the values map should be, or no values at all.
        assert_eq!(ops(json!("text"), 2), whole);
        assert_eq!(ops(Value::Null, 1), whole);
        // A values map: `cloudConfig` is added inside it.
        let map = carrier(json!({"image": {}}), 2);
        let edits = [serial];
        let added = map.patch_over(edited_part(&map.values, &edits), &edits);
        assert_eq!(
            serde_json::to_value(&added).expect("operations are JSON"),
            json!([{"op": "add", "path": "/spec/values/cloudConfig", "value":
                {"loadBalancer": {"provider-requires-serial-api-calls": true}}}])
        );
    }

    /// The edits read and write only the sections they set: patching over those (copied)
    /// gives the operations patching over a copy of all the values gives, whatever shape the
    /// values, `cloudConfig` and its sections have, and whether the values exist.
    #[test]
    fn patching_over_the_edited_sections_is_patching_over_all_values() {
        let shapes = [
            json!(null),
            json!("text"),
            json!([1]),
            json!({}),
            json!({"other": 1}),
            json!({"cloudConfig": null}),
            json!({"cloudConfig": "x"}),
            json!({"cloudConfig": {}}),
            json!({"cloudConfig": {"global": {"region": "r"}}}),
            json!({"cloudConfig": {"loadBalancer": "x", "global": {}}}),
            json!({"cloudConfig": {"loadBalancer": {"LB-Method": "x"}}, "cluster": {"name": "n"}}),
            json!({"cloudConfig": {"loadBalancer": {"lb-method": "a", "Lb-Method": "b"},
                "blockStorage": {"bs-version": "v3"}}}),
        ];
        let edit = |section, key, value| IniEdit {
            section,
            key,
            value,
        };
        let serial = edit("LoadBalancer", "provider-requires-serial-api-calls", "true");
        let method = edit("loadbalancer", "lb-method", "ROUND_ROBIN");
        let region = edit("Global", "region", "false");
        let unknown = edit("Nowhere", "key", "v");
        let lists: [Vec<IniEdit>; 6] = [
            vec![],
            vec![serial.clone()],
            vec![serial.clone(), method.clone()],
            vec![region.clone(), serial.clone(), method.clone()],
            vec![unknown, method.clone(), serial.clone(), region],
            vec![method.clone(), method],
        ];
        let mut compared = 0;
        for values in &shapes {
            for existing in [0, 1, 2] {
                let carrier = RenderedValues {
                    at: ValuesAt {
                        path: vec![Seg::key("spec"), Seg::key("values")],
                        existing,
                        prefix: "spec.values.".to_owned(),
                    },
                    values: values.clone(),
                    origins: Vec::new(),
                };
                for edits in &lists {
                    let part = carrier.patch_over(edited_part(values, edits), edits);
                    let all = carrier.patch_over(values.clone(), edits);
                    assert_eq!(part, all, "{values} {existing} {edits:?}");
                    compared += usize::from(!all.is_empty());
                }
            }
        }
        assert!(compared > 100, "{compared}");
        // Only the edited sections are copied.
        let values = json!({"cloudConfig": {"global": {"region": "r"}, "loadBalancer": {}},
            "image": {"tag": "v1"}});
        assert_eq!(
            edited_part(&values, &[serial]),
            json!({"cloudConfig": {"loadBalancer": {}}})
        );
    }
}
