//! Values sources stackgate cannot see: the unseen site, the sources named beneath or on top
//! of a place (Flux `valuesFrom`, Argo CD `fileParameters`, helm-controller `valuesSecrets`)
//! and how a values reference is described.

use super::get;
use super::places::OnTop;
use crate::sites::path::{display, shown_entry, value_at};
use crate::sites::strvals::Typing;
use crate::sites::values::UnseenValues;
use crate::sites::{FoundConfig, SiteError, strvals};
use crate::yaml::Seg;
use serde_json::Value;

/// The site that says values come from `sources`, named at `references`, which this run
/// cannot see: nothing is rendered or edited.
pub(super) fn unseen_site(object: String, references: &[Seg], sources: String) -> FoundConfig {
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
pub(super) fn unseen_sources(root: &Value, references: &[Vec<Seg>]) -> Option<(Vec<Seg>, String)> {
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
pub(super) fn on_top_sources(
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
    let list = value_at(root, "/spec/valuesFrom")?.as_array()?;
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
