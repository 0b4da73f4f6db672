//! Values set on top of a place (`--set`-like entries: HelmChart `spec.set`, Argo CD
//! `helm.parameters`) merged as Helm merges them, and the orders Argo CD may apply them in.

use super::places::{OverrideSource, ValuesPlace};
use super::{contents, get, in_values_map, in_values_text, render_cloud_config};
use crate::budget::Cancel;
use crate::sites::generation::Generation;
use crate::sites::object_data::TextField;
use crate::sites::path::{display, joined, shown_entry};
use crate::sites::strvals::{SetBudget, StrvalsError, Typing};
use crate::sites::values::{
    Overridden, Override, RenderedValues, UnseenValues, ValuesAt, ValuesText, ValuesTextRendered,
};
use crate::sites::{FoundConfig, Holder, SiteError, strvals};
use crate::yaml::Seg;
use serde_json::Value;

/// The values that `--set`-like overrides apply on top of.
pub(super) enum Beneath {
    /// Structured values in the object.
    Map(ValuesAt, Value),
    /// A YAML values string.
    Text(ValuesText),
}

/// A `--set`-like entry Helm's parser cannot read, or cannot apply to the values beneath.
#[derive(Debug)]
pub(super) struct SetFailure {
    /// How messages name the entry.
    pub(super) name: String,
    /// Path of the entry's value in the object.
    pub(super) value_path: Vec<Seg>,
    /// What Helm's parser objects to.
    pub(super) error: StrvalsError,
}

impl SetFailure {
    pub(super) fn of(o: &Override, error: StrvalsError) -> Self {
        SetFailure {
            name: o.name.clone(),
            value_path: o.value_path.clone(),
            error,
        }
    }

    /// The site that says what the chart renders is not known (nothing to edit).
    pub(super) fn site(self, object: String) -> FoundConfig {
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
pub(super) fn place_overrides(
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
pub(super) fn argo_orders(overrides: Vec<Override>) -> Vec<Vec<Override>> {
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
pub(super) fn helm_controller_typed(value: &str) -> bool {
    matches!(value.to_lowercase().as_str(), "true" | "false" | "null")
}

/// One entry read with Helm's parser (on its own, for the paths it sets and the errors of
/// its syntax; errors that depend on the values beneath come when it is applied).
pub(super) fn parsed(
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
pub(super) fn merged_with(
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
pub(super) fn in_values_over(
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
    let inner: Box<dyn crate::sites::Carrier> = match beneath {
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
