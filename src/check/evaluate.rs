//! One input through the engine: YAML documents → Kubernetes objects (or a values file) →
//! synthetic CREATE admission requests → verdicts → located findings and file fixes.

use json_patch::PatchOperation;
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::index::{Merge, Place, Resolved, ValuesIndex, own_values_only};
use super::input::ValuesTarget;
use crate::budget::Cancel;
use crate::engine::{
    self, Engine, Facts, Finding, FoundConfig, Subject, SubjectView, Trace, ValuesField, Verdict,
};
use crate::report::mask::{MaskMode, site_diffs};
use crate::report::{Item, ItemKind, Level, ObjectResult, Problem, verdict_items};
use crate::sites::helm::{
    VALUES_FILE_API_VERSION, VALUES_FILE_CHART_VERSION_KEY, VALUES_FILE_KIND,
    VALUES_FILE_SUBCHART_CONDITION_KEY, VALUES_FILE_SUBCHART_KEY, VALUES_FILE_SUBCHART_TAGS_KEY,
};
use crate::yaml::edit::{self as yamledit, Change};
use crate::yaml::{self, Node, Seg};

/// The result of checking one input.
#[derive(Debug, Clone)]
pub struct Checked {
    /// Problems that stopped part or all of the input from being checked.
    pub problems: Vec<Problem>,
    /// Objects found and evaluated.
    pub objects: Vec<ObjectResult>,
    /// The input with every fix applied (None when nothing would change).
    pub fixed: Option<String>,
    /// The input with the fixes of non-Secret objects applied, for showing as a diff.
    pub shown: Option<String>,
    /// 1-based, inclusive line ranges of the input that hold Secret objects: a diff shows
    /// none of their content, even as context of another object's fix.
    pub secret_lines: Vec<(usize, usize)>,
}

/// An object found in a document, before evaluation.
pub(super) struct Candidate {
    doc: usize,
    /// Path of the object inside the document (`items[3]` of a List), empty for the root.
    prefix: Vec<Seg>,
    /// For values files: the site paths start with `values`, which is the document root.
    values_file: bool,
    pub(super) json: Value,
    line: usize,
}

/// Checks one input text. `values_chart` is set when the input is a plain values file.
pub fn check_text(engine: &Engine, name: &str, text: &str, values_chart: Option<&str>) -> Checked {
    check_text_in(
        engine,
        name,
        text,
        values_chart.map(ValuesTarget::chart),
        &ValuesIndex::default(),
        &Facts::default(),
        crate::budget::DEFAULT_MAX_EVALUATION_MEMORY,
    )
}

/// `object` without the values label ([`SubjectView::labelled_values`]) when a HelmRelease of
/// the run reads the key it names through `valuesFrom`: that release's merged evaluation
/// reports what the values hold, naming this object as the source, so evaluating the values
/// here too would report each finding twice (and a fix belongs where the merged values say).
/// Alone in a run, the labelled object is evaluated as the webhook evaluates it.
fn unless_read_by_a_release(
    index: &ValuesIndex,
    kind: &GroupVersionKind,
    view: &SubjectView,
    mut object: DynamicObject,
) -> DynamicObject {
    let Some(labelled) = &view.labelled_values else {
        return object;
    };
    let read = index.read_by_a_release(
        &kind.kind,
        object.metadata.namespace.as_deref(),
        object.metadata.name.as_deref().unwrap_or(""),
        &labelled.key,
    );
    if read && let Some(labels) = object.metadata.labels.as_mut() {
        labels.remove(&labelled.label);
    }
    object
}

/// [`check_text`] in a run: `index` holds the run's objects, from which a Flux HelmRelease's
/// `valuesFrom` is resolved before evaluation, and `facts` the facts about the cluster derived
/// from the whole input ([`super::facts::from_inputs`]). Each object is evaluated inside a
/// memory account of `memory_limit` bytes ([`crate::budget::MemoryScope`], as the webhook's
/// per-review budget): an object whose evaluation holds more is a problem of the input, not
/// evaluated.
pub fn check_text_in(
    engine: &Engine,
    name: &str,
    text: &str,
    values_chart: Option<ValuesTarget<'_>>,
    index: &ValuesIndex,
    facts: &Facts,
    memory_limit: usize,
) -> Checked {
    let mut checked = Checked {
        problems: Vec::new(),
        objects: Vec::new(),
        fixed: None,
        shown: None,
        secret_lines: Vec::new(),
    };
    // Helm reads a values file's first document only (go-yaml v2 `Unmarshal`).
    let parsed = match values_chart {
        Some(_) => yaml::parse_first_document(text),
        None => yaml::parse_stream(text),
    };
    let docs = match parsed {
        Ok(d) => d,
        Err(e) => {
            checked.problems.push(Problem {
                line: e.line,
                column: e.column,
                message: e.message,
            });
            return checked;
        }
    };
    let mut candidates = Vec::new();
    for doc in &docs {
        match candidates_of(doc, name, values_chart) {
            Ok(c) => candidates.extend(c),
            Err(p) => checked.problems.push(p),
        }
    }
    let mut fixed = text.to_owned();
    let mut shown = text.to_owned();
    for c in candidates {
        let parsed = object_of(&c.json).map(|(kind, object)| {
            let view = engine.describe(&Subject::create(&kind, &object));
            (kind, object, view)
        });
        // A ConfigMap ClusterResourceSet payload embedding a Secret is shown like a Secret.
        let keeps_secrets = is_core_secret(&c.json)
            || parsed
                .as_ref()
                .is_some_and(|(_, _, view)| view.holds_secrets);
        if keeps_secrets && let Some(node) = docs.get(c.doc).and_then(|d| d.root.at(&c.prefix)) {
            checked
                .secret_lines
                .push((node.start.line, node.end.line.max(node.start.line)));
        }
        let Some((kind, object, view)) = parsed else {
            checked.problems.push(Problem {
                line: c.line,
                column: 1,
                message: "not a Kubernetes object: apiVersion, kind and metadata must be set and well-formed".to_owned(),
            });
            continue;
        };
        // A HelmChartConfig whose HelmChart is in this run is evaluated as part of it: the
        // HelmChart's findings about values set here are placed at this file's lines.
        if index.config_merged_into(&c.json).is_some() {
            checked.objects.push(ObjectResult {
                object: view.name,
                line: c.line,
                items: Vec::new(),
                verdict: Verdict::default(),
                json: c.json,
                secret_diffs: Vec::new(),
                fixable_in_place: false,
            });
            continue;
        }
        // With `valuesFrom` resolved, the engine evaluates the merged values; findings and the
        // patch are about them, not about this file's text, so no edit is written here.
        let resolved = index.resolve(&c.json);
        // What is shown of the merged object is asked again: its values are not the file's.
        let (kind, object, view) = match resolved.as_ref().and_then(|r| object_of(&r.object)) {
            Some((kind, object)) => {
                let view = engine.describe(&Subject::create(&kind, &object));
                (kind, object, view)
            }
            None => (kind, object, view),
        };
        let merged_from = resolved.as_ref().and_then(|r| r.sources.clone());
        let merge = resolved.as_ref().map_or(Merge::FluxOrArgo, |r| r.merge);
        let object = unless_read_by_a_release(index, &kind, &view, object);
        let evaluated = {
            // The account is on this thread and nothing else runs on it meanwhile, so it
            // counts this evaluation alone; the flag never fires, only memory stops it.
            let _account = crate::budget::MemoryScope::enter(memory_limit);
            engine.evaluate_within(&Subject::create(&kind, &object), facts, &Cancel::never())
        };
        let mut verdict = match evaluated {
            Ok(verdict) => verdict,
            Err(exhausted) => {
                checked.problems.push(Problem {
                    line: c.line,
                    column: 1,
                    message: format!("{} not evaluated: {exhausted}", view.name),
                });
                continue;
            }
        };
        // A fix of merged values goes into the object's own values (merged last), when that
        // is verified to fix the merged values too; the merged patch itself names paths this
        // file does not have.
        let own_fix = match (&merged_from, verdict.patch.is_empty()) {
            (Some(_), false) => own_values_patch(engine, index, &c.json),
            _ => None,
        };
        let fixable = merged_from.is_none() || own_fix.is_some();
        if let Some(patch) = own_fix {
            verdict.patch = patch;
        }
        let root = docs.get(c.doc).map(|d| &d.root);
        let locate = |f: &Finding| root.map_or(c.line, |r| locate(text, r, &c, f));
        // Where the evaluated object holds the chart's values, as the registry places them.
        let fields = &view.values_fields;
        let mut items = verdict_items(&verdict, locate, c.line, |f, item| {
            let Some(resolved) = resolved.as_ref().filter(|r| r.sources.is_some()) else {
                return;
            };
            let place = values_path(f, resolved, fields).and_then(|p| resolved.place_of(&p));
            if merge == Merge::HelmChartConfig {
                helm_chart_text(item);
            }
            if let (Some(sources), engine::Anchor::CloudConfig { .. }) = (&merged_from, &f.anchor) {
                add_note(item, &merged_note(sources, merge, fixable));
            }
            item.fixed_by_patch &= fixable;
            match (place, root) {
                (Some(Place::Input { input, line, what }), _) => {
                    add_note(
                        item,
                        &format!("[this value is set by {what} at {input}:{line}]"),
                    );
                    item.line = line;
                    if input != name {
                        item.file = Some(input);
                    }
                }
                (Some(Place::Own(Some((field, yaml_string)))), Some(root)) => {
                    let path = values_path(f, resolved, fields).unwrap_or_default();
                    if let Some(line) = own_line(text, root, &c, &field, yaml_string, &path) {
                        item.line = line;
                    }
                }
                (_, Some(root))
                    if merge == Merge::HelmChartConfig
                        && matches!(
                            &f.anchor,
                            engine::Anchor::CloudConfig {
                                trace: Trace::TextLine { .. },
                                ..
                            }
                        ) =>
                {
                    // Lines of the merged values text are not lines of this file: the line
                    // of the field the resolver wrote it into (the HelmChart's valuesContent).
                    let field = merge.merged_text_field().unwrap_or_default();
                    item.line =
                        doc_path(&c, &field).map_or(c.line, |p| root.deepest(&p).2.max(c.line));
                }
                _ => {}
            }
        });
        items.extend(config_not_in_run(facts, &kind, &object, c.line));
        items.sort_by_key(|i| (i.line, std::cmp::Reverse(i.level)));
        let is_secret = keeps_secrets;
        let mut secret_diffs = Vec::new();
        let mut fixable_in_place = false;
        if !verdict.patch.is_empty() && fixable {
            match apply_to_text(&fixed, &c, &verdict.patch) {
                Ok(next) => {
                    fixable_in_place = true;
                    if !is_secret && let Ok(s) = apply_to_text(&shown, &c, &verdict.patch) {
                        shown = s;
                    }
                    fixed = next;
                }
                Err(_) => fixable_in_place = false,
            }
            if is_secret {
                // Masked diffs of each cloud config the Secret's patch changes.
                let label = |site: &FoundConfig| {
                    format!(
                        "{name} ({} {}, decoded; values masked)",
                        site.object, site.location
                    )
                };
                secret_diffs = site_diffs(
                    &kind,
                    &object,
                    &c.json,
                    &verdict.patch,
                    engine,
                    label,
                    |_| MaskMode::SecretIni,
                )
                .into_iter()
                .map(|(_, diff)| diff)
                .collect();
            }
        }
        checked.objects.push(ObjectResult {
            object: view.name,
            line: c.line,
            items,
            verdict,
            json: c.json,
            secret_diffs,
            fixable_in_place,
        });
    }
    if fixed != text {
        checked.fixed = Some(fixed);
    }
    if shown != text {
        checked.shown = Some(shown);
    }
    checked
}

/// Adds `note` to an item's notes, and renders its message again.
fn add_note(item: &mut Item, note: &str) {
    if let Some(text) = &mut item.text {
        text.notes.push(note.to_owned());
    }
    rerender(item);
}

/// Renders an item's message from its parts after a face changed them.
fn rerender(item: &mut Item) {
    if let (Some(text), Some(code), Some(rule)) = (
        &item.text,
        item.code,
        crate::rules::RuleId::parse(&item.rule),
    ) {
        item.message = text.full(&item.policy, rule, code);
    }
}

/// What a finding about values merged from `valuesFrom` or `valueFiles` adds to its message:
/// where they came from, and where a fix goes (the file the value is read from, or the
/// object's own values, which are merged last). For a HelmChart with its HelmChartConfig:
/// helm-controller's order, in which the HelmChartConfig wins over the HelmChart's values.
fn merged_note(sources: &[String], merge: Merge, fixable: bool) -> String {
    let fix = if fixable {
        "stackgate check --fix adds a missing setting to the object's own values"
    } else {
        "stackgate check does not edit these merged values"
    };
    if merge == Merge::HelmChartConfig {
        let fix = if fixable {
            "stackgate check --fix adds a missing setting to the HelmChart's valuesContent"
        } else {
            "stackgate check does not edit these merged values"
        };
        return format!(
            "[the values here are merged as RKE2/k3s helm-controller merges them \
             (k3s-io/helm-controller pkg/controllers/chart/chart.go): {}, then the \
             HelmChart's spec.set on top; the HelmChartConfig wins over the HelmChart's \
             values, so set the value in the HelmChartConfig; {fix}]",
            sources.join("; ")
        );
    }
    format!(
        "[the values here are merged as Flux or Argo CD merges them: {}, then the \
         object's own values on top; set the value where it is read from, or in the object's \
         own values, which win; {fix}]",
        sources.join("; ")
    )
}

/// A finding about a HelmChart evaluated with its HelmChartConfig, shown as the engine renders
/// a merged overlay ([`engine::Text::merged_overlay`]): the item's line is the file's.
fn helm_chart_text(item: &mut Item) {
    let Some(text) = &mut item.text else {
        return;
    };
    text.merged_overlay();
    rerender(item);
}

/// The values keys a finding about a resolved object is about, when known: the node its
/// anchor names under the merged values, or for the cluster-name family on a values string,
/// `cluster.name` (when no `controllerExtraArgs` could set the name instead). Which fields
/// hold values, and whether as a map or a YAML string, is the registry's
/// ([`SubjectView::values_fields`]).
fn values_path(f: &Finding, resolved: &Resolved, fields: &[ValuesField]) -> Option<Vec<String>> {
    values_keys(
        &f.anchor,
        f.rule == crate::rules::cluster_name::FAMILY.id,
        &resolved.object,
        fields,
    )
}

/// [`values_path`] of a finding at `anchor` (of the cluster-name family when `name_rule`) on
/// `object`, whose values are in `fields`.
fn values_keys(
    anchor: &engine::Anchor,
    name_rule: bool,
    object: &Value,
    fields: &[ValuesField],
) -> Option<Vec<String>> {
    // A path of keys only: the merged layers are told apart by values keys, and the layers of
    // every source of a list of sources (Argo CD `spec.sources[]`) are merged into one list,
    // so a field inside a list is not one a layer can be found for.
    let keys_of = |path: &[Seg]| -> Option<Vec<String>> {
        path.iter()
            .map(|s| match s {
                Seg::Key(k) => Some(k.clone()),
                Seg::Index(_) => None,
            })
            .collect()
    };
    let under_values = |path: &[Seg]| -> Option<Vec<String>> {
        let keys = keys_of(path)?;
        fields
            .iter()
            .filter(|field| !field.yaml_string)
            .find_map(|field| {
                let field = keys_of(&field.path)?;
                keys.strip_prefix(field.as_slice()).map(<[String]>::to_vec)
            })
    };
    let text_field = |path: &[Seg]| {
        fields
            .iter()
            .any(|field| field.yaml_string && field.path[..] == path[..])
    };
    let text_at = |path: &[Seg]| -> Option<&str> {
        let pointer: String = keys_of(path)?
            .iter()
            .map(|k| format!("/{}", k.replace('~', "~0").replace('/', "~1")))
            .collect();
        object.pointer(&pointer)?.as_str()
    };
    match anchor {
        engine::Anchor::CloudConfig { trace, .. } => match trace {
            Trace::Node(path) => under_values(path),
            Trace::TextLine { path, line } if text_field(path) => {
                let root = yaml::parse_one(text_at(path)?).ok()?;
                let mut keys = Vec::new();
                key_path_at_line(&root, *line, &mut keys).then_some(keys)
            }
            Trace::TextLine { .. } => None,
        },
        engine::Anchor::Field { pointer } => {
            let ptr = jsonptr::Pointer::parse(pointer).ok()?;
            let segs: Vec<Seg> = ptr
                .tokens()
                .map(|t| Seg::Key(t.decoded().into_owned()))
                .collect();
            if let Some(keys) = under_values(&segs) {
                return Some(keys).filter(|p| !p.is_empty());
            }
            let extra_args = text_at(&segs).is_some_and(|t| t.contains("controllerExtraArgs"));
            (name_rule && text_field(&segs) && !extra_args)
                .then(|| vec!["cluster".to_owned(), "name".to_owned()])
        }
        // A resolved object is a Helm carrier, never a payload.
        engine::Anchor::Object | engine::Anchor::Embedded { .. } => None,
    }
}

/// The keys from `node` to the mapping key written on `line`; false when no key is there.
fn key_path_at_line(node: &Node, line: usize, keys: &mut Vec<String>) -> bool {
    let Some(entries) = node.entries() else {
        return false;
    };
    for (key, value) in entries {
        let Some(name) = key.scalar() else {
            continue;
        };
        if key.start.line == line {
            keys.push(name.to_owned());
            return true;
        }
        if value.start.line <= line && line <= value.end.line {
            keys.push(name.to_owned());
            return key_path_at_line(value, line, keys);
        }
    }
    false
}

/// The line in this file of the key `path` inside the object's own values at `field` (a YAML
/// string when `yaml_string`).
fn own_line(
    text: &str,
    root: &Node,
    c: &Candidate,
    field: &[Seg],
    yaml_string: bool,
    path: &[String],
) -> Option<usize> {
    let node = root.at(&doc_path(c, field)?)?;
    let (last, parents) = path.split_last()?;
    let parents: Vec<Seg> = parents.iter().map(|k| Seg::key(k)).collect();
    if yaml_string {
        let values = yaml::parse_one(node.scalar()?).ok()?;
        let (key, _) = values.at(&parents)?.entry(last)?;
        Some(yaml::line_within_scalar(text, node, key.start.line))
    } else {
        let (key, _) = node.at(&parents)?.entry(last)?;
        Some(key.start.line)
    }
}

/// The patch that fixes a resolved object through its own values (Flux `spec.values`, Argo
/// CD `valuesObject`/`values`/`parameters`, all merged last): the engine's patch for the
/// object without its references, kept only when the object with it applied, resolved again,
/// needs no further patch (so a `cloudConfigContents` from a referenced Secret, which the
/// chart would use instead, is never "fixed" beside it).
fn own_values_patch(
    engine: &Engine,
    index: &ValuesIndex,
    original: &Value,
) -> Option<Vec<PatchOperation>> {
    let own = own_values_only(original);
    let (kind, object) = object_of(&own)?;
    let patch = engine.evaluate(&Subject::create(&kind, &object)).patch;
    if patch.is_empty() {
        return None;
    }
    let mut patched = original.clone();
    json_patch::patch(&mut patched, &patch).ok()?;
    let again = index.resolve(&patched)?;
    again.sources.as_ref()?;
    let (kind, object) = object_of(&again.object)?;
    engine
        .evaluate(&Subject::create(&kind, &object))
        .patch
        .is_empty()
        .then_some(patch)
}

/// The kind and the object of a document, as `stackgate check` evaluates it (a CREATE), or
/// None when it is not a Kubernetes object (metadata that is not an ObjectMeta, ...).
pub(super) fn object_of(json: &Value) -> Option<(GroupVersionKind, DynamicObject)> {
    let text = |field: &str| json.get(field).and_then(Value::as_str).unwrap_or_default();
    let api_version = text("apiVersion");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = GroupVersionKind::gvk(group, version, text("kind"));
    let mut object: DynamicObject = serde_json::from_value(json.clone()).ok()?;
    // Bounded once, where the document becomes an object: every finding names it.
    crate::rules::bound_names(&mut object.metadata);
    Some((kind, object))
}

/// The objects of one document: the document itself, the items of a `List`, or the values of
/// a values file wrapped in a synthetic `HelmValues` object.
pub(super) fn candidates_of(
    doc: &yaml::YamlDoc,
    name: &str,
    values_chart: Option<ValuesTarget<'_>>,
) -> Result<Vec<Candidate>, Problem> {
    let json = doc.root.to_json().map_err(|e| Problem {
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    if let Some(target) = values_chart {
        if json.is_null() {
            return Ok(Vec::new());
        }
        if !json.is_object() {
            return Err(Problem {
                line: doc.root.start.line,
                column: doc.root.start.col + 1,
                message: "a Helm values file must be a mapping".to_owned(),
            });
        }
        let mut object = json!({
            "apiVersion": VALUES_FILE_API_VERSION,
            "kind": VALUES_FILE_KIND,
            "metadata": {"name": name},
            "chart": target.chart,
            "values": json,
        });
        if let Some(version) = target.version {
            object[VALUES_FILE_CHART_VERSION_KEY] = json!(version);
        }
        if let Some(dependency) = target.subchart {
            object[VALUES_FILE_SUBCHART_KEY] = json!(dependency.key);
            if let Some(condition) = &dependency.condition {
                object[VALUES_FILE_SUBCHART_CONDITION_KEY] = json!(condition);
            }
            object[VALUES_FILE_SUBCHART_TAGS_KEY] = json!(dependency.tags);
        }
        return Ok(vec![Candidate {
            doc: doc.index,
            prefix: Vec::new(),
            values_file: true,
            json: object,
            line: doc.root.start.line,
        }]);
    }
    let is_object = |v: &Value| {
        v.get("apiVersion").is_some_and(Value::is_string)
            && v.get("kind").is_some_and(Value::is_string)
    };
    if let Some(object) = crate::sites::delivery::synthetic_object(&json, name) {
        // A Talos machine config, a kustomization without apiVersion: read as objects (registry).
        return Ok(vec![Candidate {
            doc: doc.index,
            prefix: Vec::new(),
            values_file: false,
            json: object,
            line: doc.root.start.line,
        }]);
    }
    if !is_object(&json) {
        return Ok(Vec::new());
    }
    if json
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && let Some(items) = json.get("items").and_then(Value::as_array)
    {
        return Ok(items
            .iter()
            .enumerate()
            .filter(|(_, item)| is_object(item))
            .map(|(i, item)| {
                let prefix = vec![Seg::key("items"), Seg::Index(i)];
                let line = doc
                    .root
                    .at(&prefix)
                    .map_or(doc.root.start.line, |n| n.start.line);
                Candidate {
                    doc: doc.index,
                    prefix,
                    values_file: false,
                    json: item.clone(),
                    line,
                }
            })
            .collect());
    }
    Ok(vec![Candidate {
        doc: doc.index,
        prefix: Vec::new(),
        values_file: false,
        json,
        line: doc.root.start.line,
    }])
}

/// Turns an object path into a document path.
fn doc_path(c: &Candidate, path: &[Seg]) -> Option<Vec<Seg>> {
    let mut out = c.prefix.clone();
    if c.values_file {
        match path.split_first() {
            Some((Seg::Key(k), rest)) if k == "values" => out.extend(rest.iter().cloned()),
            _ => return None,
        }
    } else {
        out.extend(path.iter().cloned());
    }
    Some(out)
}

/// The input line a finding is about.
fn locate(text: &str, root: &Node, c: &Candidate, f: &Finding) -> usize {
    let object_line = c.line;
    let anchor = match &f.anchor {
        engine::Anchor::CloudConfig { trace, .. } | engine::Anchor::Embedded { trace, .. } => {
            trace.clone()
        }
        engine::Anchor::Field { pointer } => Trace::Node(pointer_segs(
            root.at(&c.prefix).unwrap_or(root),
            pointer,
            c.values_file,
        )),
        engine::Anchor::Object => return object_line,
    };
    let line = match anchor {
        Trace::Node(path) => doc_path(c, &path).map(|p| {
            let (used, _, line) = root.deepest(&p);
            if used > c.prefix.len() {
                line
            } else {
                object_line
            }
        }),
        Trace::TextLine { path, line } => doc_path(c, &path).map(|p| match root.at(&p) {
            Some(node) if node.scalar().is_some() => yaml::line_within_scalar(text, node, line),
            _ => root.deepest(&p).2,
        }),
    };
    line.unwrap_or(object_line)
}

/// The path of a JSON pointer, resolving numeric tokens against the tree (sequence index or
/// mapping key).
fn pointer_segs(object_root: &Node, pointer: &str, values_file: bool) -> Vec<Seg> {
    let Ok(ptr) = jsonptr::Pointer::parse(pointer) else {
        return Vec::new();
    };
    let mut node = Some(object_root);
    let mut out = Vec::new();
    for (i, token) in ptr.tokens().enumerate() {
        let t = token.decoded().into_owned();
        // A values file's document root is the object's `values`.
        if values_file && i == 0 {
            out.push(Seg::Key(t));
            continue;
        }
        let seg = match (node.map(|n| &n.kind), t.parse::<usize>()) {
            (Some(yaml::Kind::Seq(_)), Ok(i)) => Seg::Index(i),
            _ => Seg::Key(t),
        };
        node = node.and_then(|n| n.child(&seg));
        out.push(seg);
    }
    out
}

/// Writes a JSON Patch into the input text as minimal edits, verified against the JSON the
/// patch produces.
fn apply_to_text(text: &str, c: &Candidate, patch: &[PatchOperation]) -> Result<String, ()> {
    let mut current = text.to_owned();
    for op in patch {
        let (path, value) = match op {
            PatchOperation::Add(a) => (a.path.to_string(), a.value.clone()),
            PatchOperation::Replace(r) => (r.path.to_string(), r.value.clone()),
            _ => return Err(()),
        };
        let docs = yaml::parse_stream(&current).map_err(|_| ())?;
        let root = &docs.get(c.doc).ok_or(())?.root;
        let object_root = root.at(&c.prefix).ok_or(())?;
        let segs = pointer_segs(object_root, &path, c.values_file);
        if segs.iter().any(|s| matches!(s, Seg::Key(k) if k == "-")) {
            return Err(());
        }
        let full = doc_path(c, &segs).ok_or(())?;
        current =
            yamledit::apply(&current, c.doc, &Change::Set { path: full, value }).map_err(|_| ())?;
    }
    // The edited document must read as the object with the patch applied.
    let mut expected = c.json.clone();
    json_patch::patch(&mut expected, patch).map_err(|_| ())?;
    let docs = yaml::parse_stream(&current).map_err(|_| ())?;
    let root = &docs.get(c.doc).ok_or(())?.root;
    let got = root.at(&c.prefix).ok_or(())?.to_json().map_err(|_| ())?;
    let want = if c.values_file {
        expected.get("values").cloned().unwrap_or(Value::Null)
    } else {
        expected
    };
    if got == want { Ok(current) } else { Err(()) }
}

/// Whether an object is a core `v1` Secret.
fn is_core_secret(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && object.get("kind").and_then(Value::as_str) == Some("Secret")
}

/// One note per config object a CCM container of `object` reads that the run does not hold:
/// `check` cannot say what that CCM runs with, and says so instead of staying silent.
fn config_not_in_run(
    facts: &Facts,
    kind: &GroupVersionKind,
    object: &DynamicObject,
    line: usize,
) -> Vec<Item> {
    let Some(reads) = facts.ccm_reads() else {
        return Vec::new();
    };
    let workload = crate::facts::ccm_config::WorkloadKey::of(kind, object);
    reads
        .not_in_input(&workload)
        .into_iter()
        .map(|read| Item {
            level: Level::Note,
            kind: ItemKind::Audit,
            policy: crate::rules::ccm_config_source::FAMILY.id.to_string(),
            rule: crate::rules::ccm_config_source::FAMILY.id.to_string(),
            code: None,
            line,
            message: format!(
                "{}: reads its cloud config from {} (--cloud-config={}), which is not in this \
                 run: check has not checked what this CCM runs with (add the object's manifest \
                 to the run, or run `stackgate audit` on the cluster)",
                read.reader, read.object, read.path
            ),
            text: None,
            fixed_by_patch: false,
            file: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values keys a finding at `anchor` names on the resolved `object`, with the fields
    /// the engine says it holds values in.
    fn keys(object: &Value, anchor: &engine::Anchor, name_rule: bool) -> Option<Vec<String>> {
        let (kind, dynamic) = object_of(object).expect("an object");
        let engine = Engine::new(crate::policy::PolicySet::embedded().expect("the policies load"));
        let view = engine.describe(&Subject::create(&kind, &dynamic));
        values_keys(anchor, name_rule, object, &view.values_fields)
    }

    fn node(path: &[Seg]) -> engine::Anchor {
        engine::Anchor::CloudConfig {
            pointer: String::new(),
            line: None,
            trace: Trace::Node(path.to_vec()),
        }
    }

    fn field(pointer: &str) -> engine::Anchor {
        engine::Anchor::Field {
            pointer: pointer.to_owned(),
        }
    }

    fn segs(keys: &[&str]) -> Vec<Seg> {
        keys.iter().map(|k| Seg::key(k)).collect()
    }

    fn strings(keys: &[&str]) -> Option<Vec<String>> {
        Some(keys.iter().map(|k| (*k).to_owned()).collect())
    }

    const CHART: &str = "openstack-cloud-controller-manager";

    #[test]
    fn flux_values_keys_are_below_spec_values() {
        let release = json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": {"spec": {"chart": CHART}},
                     "values": {"cloudConfig": {"global": {"region": "RegionOne"}}}},
        });
        let at = node(&segs(&[
            "spec",
            "values",
            "cloudConfig",
            "global",
            "region",
        ]));
        assert_eq!(
            keys(&release, &at, false),
            strings(&["cloudConfig", "global", "region"])
        );
        assert_eq!(
            keys(&release, &field("/spec/values/cluster/name"), true),
            strings(&["cluster", "name"])
        );
        // The values map itself is no key.
        assert_eq!(keys(&release, &field("/spec/values"), true), None);
        assert_eq!(keys(&release, &field("/spec/chart/spec/chart"), true), None);
    }

    #[test]
    fn umbrella_values_keys_start_with_the_subchart_key() {
        let release = json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "platform", "namespace": "kube-system"},
            "spec": {"chart": {"spec": {"chart": "platform"}},
                     "values": {CHART: {"cloudConfig": {"global": {"region": "RegionOne"}}}}},
        });
        let at = node(&segs(&["spec", "values", CHART, "cloudConfig", "global"]));
        assert_eq!(
            keys(&release, &at, false),
            strings(&[CHART, "cloudConfig", "global"])
        );
    }

    #[test]
    fn argo_values_keys_are_below_values_object_of_a_single_source_only() {
        let source = json!({"chart": CHART, "repoURL": "https://example.org/charts",
                            "helm": {"valuesObject": {"cloudConfig": {"global": {"region": "R"}}}}});
        let single = json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "occm", "namespace": "argocd"},
            "spec": {"source": source},
        });
        let at = node(&segs(&[
            "spec",
            "source",
            "helm",
            "valuesObject",
            "cloudConfig",
            "global",
        ]));
        assert_eq!(
            keys(&single, &at, false),
            strings(&["cloudConfig", "global"])
        );
        // The layers of a list of sources are merged into one list: no key is claimed.
        let listed = json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "occm", "namespace": "argocd"},
            "spec": {"sources": [source]},
        });
        let mut path = vec![Seg::key("spec"), Seg::key("sources"), Seg::Index(0)];
        path.extend(segs(&["helm", "valuesObject", "cloudConfig", "global"]));
        assert_eq!(keys(&listed, &node(&path), false), None);
    }

    #[test]
    fn helm_chart_values_keys_are_read_from_the_values_content_line() {
        let chart = |text: &str| {
            json!({
                "apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
                "metadata": {"name": CHART, "namespace": "kube-system"},
                "spec": {"chart": CHART, "valuesContent": text},
            })
        };
        let resolved = chart("cloudConfig:\n  global:\n    region: RegionOne\n");
        let line = |line| engine::Anchor::CloudConfig {
            pointer: String::new(),
            line: None,
            trace: Trace::TextLine {
                path: segs(&["spec", "valuesContent"]),
                line,
            },
        };
        assert_eq!(
            keys(&resolved, &line(3), false),
            strings(&["cloudConfig", "global", "region"])
        );
        // A node of a structured field is not a values key of a values string.
        let at = node(&segs(&["spec", "values", "cloudConfig"]));
        assert_eq!(keys(&resolved, &at, false), None);
        // The cluster-name family on the values string: `cluster.name`, unless the
        // controller's extra arguments could name the cluster instead.
        let content = field("/spec/valuesContent");
        assert_eq!(
            keys(&resolved, &content, true),
            strings(&["cluster", "name"])
        );
        assert_eq!(keys(&resolved, &content, false), None);
        let extra = chart("controllerExtraArgs: |-\n  - --cluster-name=a\ncloudConfig: {}\n");
        assert_eq!(keys(&extra, &content, true), None);
    }
}
