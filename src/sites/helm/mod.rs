//! Helm-values sites: the `openstack-cloud-controller-manager` chart's values inside GitOps
//! objects, and the chart's `controllerExtraArgs`.
//!
//! Which objects these are, where each names the chart and which of its fields hold values (in
//! Helm's order, and which stackgate cannot see) is the registry of delivery paths
//! ([`super::delivery::REGISTRY`], generated into `docs/carriers.md`): each entry's `values`
//! are the typed places and readers `places.rs` reads. With values this object does not hold (Flux `spec.valuesFrom`, Argo
//! CD `helm.valueFiles`, …) the site is unseen (`SiteError::Unseen`) unless the values here
//! decide alone.
//!
//! Inside the values, the chart renders its Secret `cloud.conf` from `cloudConfigContents`
//! (raw INI) when that is set, else from the structured `cloudConfig` map
//! ([`super::render`]); with `secret.enabled` or `secret.create` false it renders no Secret,
//! so the values are not a site (the externally provided Secret is checked on its own).
//!
//! Values set on top (`spec.set`, `helm.parameters`) are merged as Helm merges `--set` over
//! values files; a rendered line that comes from one is located at it and an edit of its key
//! is written there (`values::Overridden`). Entries are read with Helm's own `--set` parser
//! ([`super::strvals`]); one it cannot read makes the site say it cannot tell.
//!
//! This module finds the values and reads the cloud config in them; the carriers that map it
//! back to the object and write edits are in `values.rs` (and `object_data.rs` for
//! `cloudConfigContents` in structured values, a plain string field).

use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::generation::Generation;
use super::object_data::TextField;
use super::path::{display, shown_entry, value_at};
use super::render::{self, Origin};
use super::values::{
    Override, RenderedValues, UnseenValues, ValuesAt, ValuesText, ValuesTextContents,
    ValuesTextRendered,
};
use super::{FoundConfig, Holder, SiteError};
use crate::budget::Cancel;
use crate::yaml::{self, Seg};

mod chart_values;
mod overrides;
pub(super) mod places;
mod unseen;
mod version;

use super::delivery::{ObjectPlaces, unnamed_chart_ref_with_values, values_places};
pub use chart_values::{
    ChartValues, SetEntry, chart_values_all, chart_values_all_in, controller_extra_args,
    helm_controller_extra_args, helm_controller_extra_args_all, helm_controller_extra_args_all_in,
};
use overrides::{Beneath, SetFailure, argo_orders, in_values_over, merged_with, place_overrides};
pub use places::{
    MAX_CARRIERS_PER_OBJECT, MAX_VALUES_TEXT_BYTES, VALUES_FILE_API_VERSION,
    VALUES_FILE_CHART_VERSION_KEY, VALUES_FILE_KIND, VALUES_FILE_SUBCHART_CONDITION_KEY,
    VALUES_FILE_SUBCHART_KEY, VALUES_FILE_SUBCHART_TAGS_KEY,
};
use places::{OverrideSource, Switch, ValuesPlace, text_values};
use places::{content, get, keys, str_at};
pub use unseen::{FLUX_DEFAULT_VALUES_KEY, describe_values_reference, helm_controller_secrets};
use unseen::{on_top_sources, unseen_site, unseen_sources};
pub use version::{CcmVersion, ccm_version, ccm_version_in, image_version};

/// Charts whose values hold an OpenStack CCM cloud config, when the policy set names none.
pub const DEFAULT_CHARTS: &[&str] = &[
    "openstack-cloud-controller-manager",
    // Giant Swarm's umbrella: the CCM chart's values shape at its root (`delivery.rs`).
    super::chart::GIANT_SWARM_APP_CHART,
];

pub(crate) use super::default_chart_names;

/// The chart names a policy set's sites document asks for.
pub fn chart_names(sites: &super::SitesDocument) -> &'static [String] {
    // The sites document has no chart list yet: use the default.
    let _ = sites;
    default_chart_names()
}

/// How many leading segments of `path` exist in `root` (not null).
fn existing_segments(root: &Value, path: &[Seg]) -> usize {
    let mut existing = 0;
    let mut node = root;
    for seg in path {
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
    existing
}

/// The object description used in messages: `HelmRelease kube-system/occm`, or
/// `values file clusters/a/values.yaml` for a plain values file.
pub fn object_name(gvk: &GroupVersionKind, object: &DynamicObject) -> String {
    let name = object.metadata.name.as_deref().unwrap_or("");
    if is_values_file(gvk) {
        return format!("values file {name}");
    }
    // Written piece by piece: every values object of a review is named (its sites, its
    // object rules), and `format!` costs more than the pieces.
    let namespace = object
        .metadata
        .namespace
        .as_deref()
        .filter(|ns| !ns.is_empty());
    let mut out = String::with_capacity(
        gvk.kind.len() + 2 + namespace.map_or(0, |ns| ns.len() + 1) + name.len(),
    );
    out.push_str(&gvk.kind);
    out.push(' ');
    if let Some(ns) = namespace {
        out.push_str(ns);
        out.push('/');
    }
    out.push_str(name);
    out
}

/// Finds the cloud configs in the values of the charts in `charts` that `object` holds.
pub(super) fn find(
    read_places: &ObjectPlaces<'_>,
    charts: &[String],
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let (gvk, object) = (read_places.gvk(), read_places.object());
    let object_name = object_name(gvk, object);
    let places = read_places.of(charts, cancel);
    if places.len() > MAX_CARRIERS_PER_OBJECT {
        // Each values string is parsed with caps of its own; an object with hundreds of them
        // would multiply those caps. None is read, and the object is reported instead (named
        // as a `cloudConfigContents` at the root, as nothing finer is known).
        let location = display(&keys(&["spec", "sources"]));
        let text = Err(SiteError::TooManyCarriers {
            location: location.clone(),
            count: places.len(),
            limit: MAX_CARRIERS_PER_OBJECT,
        });
        let contents = "cloudConfigContents";
        let carrier = TextField::new(keys(&[contents]), contents.to_owned(), Holder::HelmValues);
        return vec![FoundConfig::new(object_name, location, text, carrier)];
    }
    let root = content(object);
    let values_file = is_values_file(gvk);
    let mut found = Vec::new();
    for (group, place) in places.iter().enumerate() {
        // Each place parses and merges its values: none is started once the flag fired.
        if cancel.is_cancelled() {
            break;
        }
        found.extend(read(&object_name, root, place, values_file, group, cancel));
    }
    if let Some(site) = post_rendered(gvk, root, &object_name, &found) {
        found.push(site);
    }
    found
}

/// The site that says a Flux HelmRelease's `spec.postRenderers` change what the chart renders
/// from the values stackgate read (`found`): Flux runs them over the rendered manifests (a
/// kustomize `patches`, `images`, … stack), so the cloud-config Secret and the CCM DaemonSet
/// the CCM gets may differ from what the values render. None without post-renderers, or when
/// no values of the chart were found (stackgate then claims nothing about the release).
fn post_rendered(
    gvk: &GroupVersionKind,
    root: &Value,
    object_name: &str,
    found: &[FoundConfig],
) -> Option<FoundConfig> {
    if gvk.group != "helm.toolkit.fluxcd.io" || found.is_empty() {
        return None;
    }
    let list = value_at(root, "/spec/postRenderers")?.as_array()?;
    if list.is_empty() {
        return None;
    }
    // `kustomize.patches`, `kustomize.images`: what each post-renderer does, by field name.
    let mut kinds: Vec<String> = Vec::new();
    for renderer in list.iter().take(4).filter_map(Value::as_object) {
        for (kind, spec) in renderer {
            match spec.as_object() {
                Some(fields) if !fields.is_empty() => kinds.extend(
                    fields
                        .keys()
                        .take(4)
                        .map(|f| format!("{}.{}", shown_entry(kind), shown_entry(f))),
                ),
                _ => kinds.push(shown_entry(kind)),
            }
        }
    }
    let at = keys(&["spec", "postRenderers"]);
    let location = display(&at);
    let error = SiteError::PostRendered {
        location: location.clone(),
        renderers: format!("{} post-renderer(s): {}", list.len(), kinds.join(", ")),
    };
    let mut site = FoundConfig::new(
        object_name.to_owned(),
        location,
        Err(error),
        UnseenValues { path: at },
    );
    site.mutable = false;
    Some(site)
}

/// Reads the values at `place` and finds the cloud config in them (none when the chart would
/// render no Secret).
///
/// Argo CD hands its parameters to Helm in no fixed order within `--set` and within
/// `--set-string` ([`argo_orders`]): when two of them set the same value, the values are read
/// once per order that lets a different one win, so a denial holds whichever Helm gets.
fn read(
    object_name: &str,
    root: &Value,
    place: &ValuesPlace,
    values_file: bool,
    group: usize,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let generations = place.generations;
    let switch = match &place.switch {
        Switch::On => None,
        Switch::Unseen(why) => Some(why.clone()),
    };
    let mut readings: Vec<(Option<Generation>, Vec<FoundConfig>)> = Vec::new();
    if switch.is_some() {
        // Switched off, the subchart renders nothing; Helm still reads every `--set` entry
        // into the umbrella's values first, so one it cannot read stops it either way.
        let off = match place_overrides(root, place, cancel) {
            Ok(_) => Vec::new(),
            Err(failure) => vec![failure.site(object_name.to_owned())],
        };
        readings.push((None, off));
    }
    for generation in generations.iter() {
        if cancel.is_cancelled() {
            break;
        }
        let mut found = read_as(object_name, root, place, values_file, generation, cancel);
        if generation == Generation::Unquoted {
            for site in &mut found {
                if site.carrier.writes_lines_of_a_value() {
                    site.mutable = false;
                    site.note = Some(UNQUOTED_LINE_BREAK_NOTE.to_owned());
                }
            }
        }
        readings.push((Some(generation), found));
    }
    alternatives(readings, group, switch)
}

/// Why a config chart versions 1.0.0–1.3.0 and 2.24.0 render is not edited when a value
/// writes lines of its own.
const UNQUOTED_LINE_BREAK_NOTE: &str = "a cloudConfig value holds a line break, which chart \
     versions 1.0.0–1.3.0 and 2.24.0 write unquoted, as lines of their own; setting a key \
     cannot undo such a line, so remove the line break";

/// The readings of one place, one per generation its version allows (and one with the
/// subchart switched off, `None`, when an umbrella's switch is unseen: `switch` says what could
/// switch it), as the sites to check: the newest generation's when every reading is the same
/// config (or none), else one alternative per distinct reading ([`super::Alternative`],
/// numbered `group`), each naming the chart versions that read it so. The engine denies only
/// what every alternative denies.
fn alternatives(
    mut readings: Vec<(Option<Generation>, Vec<FoundConfig>)>,
    group: usize,
    switch: Option<String>,
) -> Vec<FoundConfig> {
    // Distinct readings: (generations, sites), in the order first seen.
    let mut classes: Vec<(Vec<Generation>, Vec<FoundConfig>)> = Vec::new();
    for (generation, found) in readings.drain(..) {
        match classes
            .iter_mut()
            .find(|(_, sites)| same_reading(sites, &found))
        {
            Some((generations, sites)) => {
                generations.extend(generation);
                // The newest generation's sites stand for the class.
                *sites = found;
            }
            None => classes.push((generation.into_iter().collect(), found)),
        }
    }
    if classes.len() <= 1 {
        return classes.pop().map(|(_, sites)| sites).unwrap_or_default();
    }
    let of = classes.len();
    let by_version = classes.iter().filter(|(g, _)| !g.is_empty()).count() > 1;
    let mut out = Vec::new();
    for (class, (generations, sites)) in classes.into_iter().enumerate() {
        let versions = super::generation::versions_of(&generations);
        for mut site in sites {
            site.alternative = Some(super::Alternative {
                group,
                class,
                of,
                versions: versions.clone(),
                generations: generations.clone(),
                by_version,
                switch: switch.clone(),
            });
            out.push(site);
        }
    }
    out
}

/// Whether two readings are the same config in the same places: the same sites, each at the
/// same location and field, with texts gcfg reads alike (quoting aside) or the same error.
fn same_reading(a: &[FoundConfig], b: &[FoundConfig]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.location == b.location
                && a.pointer() == b.pointer()
                && a.mutable == b.mutable
                && match (&a.text, &b.text) {
                    (Ok(x), Ok(y)) => x == y || super::same_settings(x.expose(), y.expose()),
                    (Err(x), Err(y)) => x == y,
                    _ => false,
                }
        })
}

/// [`read`] as the chart's `generation` renders the values.
fn read_as(
    object_name: &str,
    root: &Value,
    place: &ValuesPlace,
    values_file: bool,
    generation: Generation,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let overrides = place_overrides(root, place, cancel);
    let argo = matches!(place.overrides, Some(OverrideSource::ArgoParameters(_)));
    match overrides {
        Ok(overrides) if argo => argo_orders(overrides)
            .into_iter()
            .take_while(|_| !cancel.is_cancelled())
            .filter_map(|order| {
                read_ordered(
                    object_name,
                    root,
                    place,
                    values_file,
                    Ok(order),
                    generation,
                    cancel,
                )
            })
            .collect(),
        overrides => read_ordered(
            object_name,
            root,
            place,
            values_file,
            overrides,
            generation,
            cancel,
        )
        .into_iter()
        .collect(),
    }
}

/// [`read`] with the `--set`-like entries in the order Helm applies them.
fn read_ordered(
    object_name: &str,
    root: &Value,
    place: &ValuesPlace,
    values_file: bool,
    overrides: Result<Vec<Override>, SetFailure>,
    generation: Generation,
    cancel: &Cancel,
) -> Option<FoundConfig> {
    let existing = existing_segments(root, &place.path);
    let raw = (existing == place.path.len())
        .then(|| get(root, &place.path))
        .flatten();
    let field = display(&place.path);
    // How messages name a path inside the values: a values file's values are the file.
    let prefix = match (values_file, place.yaml_string) {
        (true, _) if place.path.len() > 1 => format!("{}.", display(&place.path[1..])),
        (true, _) => String::new(),
        (false, true) => match &place.alias {
            Some(alias) => format!("{field}, {alias}."),
            None => format!("{field}, "),
        },
        (false, false) => format!("{field}."),
    };
    let at = ValuesAt {
        path: place.path.clone(),
        existing,
        prefix,
    };
    let object = object_name.to_owned();
    let overrides = match overrides {
        Ok(overrides) => overrides,
        Err(failure) => return Some(failure.site(object)),
    };
    if let Some((at, chart)) = &place.chart_unseen {
        // Which templates render these values (and which defaults they start from) is not
        // known: nothing here decides.
        return Some(unseen_site(object, at, chart.clone()));
    }
    if let Some((at, sources)) =
        on_top_sources(root, place.unseen_on_top.as_ref(), place.alias.as_deref())
    {
        // Helm reads these after the values here: nothing here decides.
        return Some(unseen_site(object, &at, sources));
    }
    if let Some((references, sources)) = unseen_sources(root, &place.unseen) {
        // The values here are merged over the unseen ones: they decide alone only with
        // `cloudConfigContents` or the Secret switched off.
        let top = if place.yaml_string {
            text_values(raw, place.alias.as_deref(), cancel)
        } else {
            Some(raw.cloned().unwrap_or(Value::Null))
        };
        if let Some(top) = top {
            let merged = match merged_with(&top, &overrides, cancel) {
                Ok(merged) => merged,
                Err(failure) => return Some(failure.site(object)),
            };
            if !renders_secret(&merged, generation) {
                return None;
            }
            if contents(&merged, generation).is_none() {
                return Some(unseen_site(object, &references, sources));
            }
        }
    }
    if place.yaml_string {
        let subchart = place.alias.as_deref();
        return read_values_text(
            object, at, field, raw, overrides, subchart, generation, cancel,
        );
    }
    let values = raw.cloned().unwrap_or(Value::Null);
    if !overrides.is_empty() {
        let merged = match merged_with(&values, &overrides, cancel) {
            Ok(merged) => merged,
            Err(failure) => return Some(failure.site(object)),
        };
        return renders_secret(&merged, generation).then(|| {
            let beneath = Beneath::Map(at, values);
            in_values_over(object, beneath, merged, overrides, generation, cancel)
        });
    }
    renders_secret(&values, generation)
        .then(|| in_values_map(object, at, values, generation, cancel))
}

/// Reads a YAML values string (`raw`, absent when the field is) named `field` in messages.
// The values string, where it is, what is set on top and how the chart reads it: each
// argument is one of those, and bundling them would only rename them.
#[allow(clippy::too_many_arguments)]
fn read_values_text(
    object: String,
    at: ValuesAt,
    field: String,
    raw: Option<&Value>,
    overrides: Vec<Override>,
    subchart: Option<&str>,
    generation: Generation,
    cancel: &Cancel,
) -> Option<FoundConfig> {
    let yaml = match raw {
        None => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            let location = field.clone();
            let error = SiteError::NotAString { location };
            return Some(unread_values_text(object, at, field, error));
        }
    };
    if yaml.len() > MAX_VALUES_TEXT_BYTES {
        let error = SiteError::TooLarge {
            location: field.clone(),
            size: yaml.len(),
            limit: MAX_VALUES_TEXT_BYTES,
        };
        return Some(unread_values_text(object, at, field, error));
    }
    let yaml = yaml.to_owned();
    // Under an umbrella chart, the CCM's values are those under its subchart key.
    let text_of = |at: ValuesAt, yaml: String, values: Value| match subchart {
        Some(key) => ValuesText::new(at, yaml, values).under(key),
        None => ValuesText::new(at, yaml, values),
    };
    let parsed = yaml::parse_one_within(&yaml, cancel)
        .and_then(|n| n.to_json())
        .map(|values| match subchart {
            Some(key) => values.get(key).cloned().unwrap_or(Value::Null),
            None => values,
        });
    match parsed {
        Ok(values) if !overrides.is_empty() => {
            let merged = match merged_with(&values, &overrides, cancel) {
                Ok(merged) => merged,
                Err(failure) => return Some(failure.site(object)),
            };
            renders_secret(&merged, generation).then(|| {
                let beneath = Beneath::Text(text_of(at, yaml, values));
                in_values_over(object, beneath, merged, overrides, generation, cancel)
            })
        }
        Ok(values) => renders_secret(&values, generation)
            .then(|| in_values_text(object, text_of(at, yaml, values), generation, cancel)),
        Err(error) => {
            let location = field.clone();
            let error = SiteError::Yaml { location, error };
            let text = text_of(at, yaml, Value::Null);
            Some(FoundConfig::new(
                object,
                field,
                Err(error),
                ValuesTextContents { text },
            ))
        }
    }
}

/// A values string stackgate does not parse (not a string, or too large). Nothing in it is
/// known, so messages and pointers name it like `cloudConfigContents` in a values map.
fn unread_values_text(
    object: String,
    at: ValuesAt,
    field: String,
    error: SiteError,
) -> FoundConfig {
    let location = format!("{field}.cloudConfigContents");
    let mut path = at.path;
    path.push(Seg::key("cloudConfigContents"));
    let carrier = TextField::new(path, location, Holder::HelmValues);
    FoundConfig::new(object, field, Err(error), carrier)
}

/// The cloud config in structured values: `cloudConfigContents` when set (a string field of
/// the object), else `cloudConfig` rendered.
fn in_values_map(
    object: String,
    at: ValuesAt,
    values: Value,
    generation: Generation,
    cancel: &Cancel,
) -> FoundConfig {
    if let Some(contents) = contents(&values, generation) {
        let location = at.name("cloudConfigContents");
        let mut path = at.path;
        path.push(Seg::key("cloudConfigContents"));
        return TextField::found(object, path, location, contents, Holder::HelmValues);
    }
    let location = at.name("cloudConfig");
    let (text, origins) = render_cloud_config(&values, &location, generation, cancel);
    let carrier = RenderedValues {
        at,
        values,
        origins,
    };
    FoundConfig::new(object, location, text, carrier)
}

/// The cloud config in a values string: `cloudConfigContents` when set, else `cloudConfig`
/// rendered.
pub(super) fn in_values_text(
    object: String,
    text: ValuesText,
    generation: Generation,
    cancel: &Cancel,
) -> FoundConfig {
    if let Some(contents) = contents(&text.values, generation) {
        let location = text.at.name("cloudConfigContents");
        let ini = match contents {
            Value::String(ini) => Ok(ini.clone()),
            _ => Err(SiteError::NotAString {
                location: location.clone(),
            }),
        };
        return FoundConfig::new(object, location, ini, ValuesTextContents { text });
    }
    let location = text.at.name("cloudConfig");
    let (ini, origins) = render_cloud_config(&text.values, &location, generation, cancel);
    FoundConfig::new(object, location, ini, ValuesTextRendered { text, origins })
}

/// `cloudConfigContents`, when the chart's `generation` uses it (a truthy value, from 1.4.0
/// and 2.25.0 on).
fn contents(values: &Value, generation: Generation) -> Option<&Value> {
    if !generation.reads_contents() {
        return None;
    }
    values.get("cloudConfigContents").filter(|v| truthy(v))
}

/// The INI the chart renders from `cloudConfig` and the origin of each line, or why it
/// cannot render it.
fn render_cloud_config(
    values: &Value,
    location: &str,
    generation: Generation,
    cancel: &Cancel,
) -> (Result<String, SiteError>, Vec<Origin>) {
    match render::render_as(values.get("cloudConfig"), generation, cancel) {
        Ok(rendered) => (Ok(rendered.text), rendered.lines),
        Err(error) => {
            let location = location.to_owned();
            (Err(SiteError::Render { location, error }), Vec::new())
        }
    }
}

/// Whether `gvk` is the synthetic object `stackgate check` builds for a plain values file.
fn is_values_file(gvk: &GroupVersionKind) -> bool {
    gvk.group == "stackgate.dev" && gvk.kind == VALUES_FILE_KIND
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

/// Whether the chart's `generation` renders its cloud-config Secret with these values:
/// `secret.enabled` and `secret.create` default to true and only an explicit falsy value turns
/// them off; before 2.28.0-alpha.5 `secret.enabled` is not read at all.
pub(super) fn renders_secret(values: &Value, generation: Generation) -> bool {
    let Some(secret) = values.get("secret") else {
        return true;
    };
    let switches: &[&str] = if generation.honours_secret_enabled() {
        &["enabled", "create"]
    } else {
        &["create"]
    };
    switches.iter().all(|k| secret.get(k).is_none_or(truthy))
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
    !values_places(gvk, object, charts, &Cancel::never()).is_empty()
        || unnamed_chart_ref_with_values(gvk, object, charts)
}

#[cfg(test)]
mod tests {
    use super::overrides::helm_controller_typed;
    use super::version::shown_version;
    use super::*;
    use crate::cloudconf::{Document, IniEdit};
    use crate::secret_text::SecretText;

    /// [`super::find`] of an object read on its own.
    fn find(
        gvk: &GroupVersionKind,
        object: &DynamicObject,
        charts: &[String],
        cancel: &Cancel,
    ) -> Vec<FoundConfig> {
        super::find(&ObjectPlaces::new(gvk, object), charts, cancel)
    }
    use crate::sites::Anchor;
    use crate::sites::chart::chart_matches;
    use crate::sites::path::pointer;
    use crate::sites::strvals;
    use serde_json::json;

    fn charts() -> Vec<String> {
        DEFAULT_CHARTS.iter().map(|s| (*s).to_owned()).collect()
    }

    /// The edit most of these tests make: serial Octavia API calls on.
    const SERIAL_CALLS: IniEdit = IniEdit {
        section: "LoadBalancer",
        key: "provider-requires-serial-api-calls",
        value: "true",
    };

    /// The patch `found` writes for [`SERIAL_CALLS`], given its text as parsed (not edited).
    fn serial_calls_patch(found: &FoundConfig) -> Value {
        let doc = Document::parse(found.text.as_ref().unwrap().expose()).unwrap();
        serde_json::to_value(found.patch(&doc, &[SERIAL_CALLS])).unwrap()
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

    /// The admission decoder keeps another chart's values whole only for a Flux release that
    /// names its chart by a `chartRef` alone (whether they are the CCM chart's is told from the
    /// full reading): not when `spec.chart.spec.chart` names another chart beside it, and not
    /// without structured values.
    #[test]
    fn only_a_chart_ref_alone_with_values_keeps_another_charts_values() {
        let sites: crate::sites::SitesDocument =
            serde_saphyr::from_str(include_str!("../../../policies/cloud-config-sites.yaml"))
                .expect("the default sites document parses");
        let release = |chart: Option<&str>, values: Option<Value>| {
            let mut spec = json!({"chartRef": {"kind": "OCIRepository", "name": "occm-chart"}});
            if let Some(chart) = chart {
                spec["chart"] = json!({"spec": {"chart": chart}});
            }
            if let Some(values) = values {
                spec["values"] = values;
            }
            obj(
                json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "occm", "namespace": "kube-system"}, "spec": spec}),
            )
        };
        let holds = |(gvk, object): (GroupVersionKind, DynamicObject)| {
            holds_chart_values(&gvk, &object, &sites)
        };
        let values = json!({"image": {"tag": "v1.33.0"}});
        assert!(holds(release(None, Some(values.clone()))));
        assert!(!holds(release(None, None)));
        assert!(!holds(release(None, Some(json!("image: {}")))));
        assert!(!holds(release(Some("other-chart"), Some(values))));
    }

    #[test]
    fn ccm_versions_from_chart_versions_and_image_tags() {
        let c = charts();
        let flux = |version: &str, values: Value| {
            obj(
                json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "occm", "namespace": "kube-system"},
                "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager",
                    "version": version}}, "values": values}}),
            )
        };
        let range = |v: Option<CcmVersion>| v.map(|v| (v.min_minor, v.max_minor));
        for (version, want) in [
            ("2.33.0", Some((33, 33))),
            ("v2.36.1", Some((36, 36))),
            ("2.34.0-alpha.1", Some((33, 34))),
            ("2.31.1+build.5", Some((31, 31))),
            (">=2.30.0", None),
            ("2.x", None),
            ("1.5.1", None),
            ("2.26.0", None),
            ("2.33", None),
            ("", None),
        ] {
            let (gvk, o) = flux(version, json!({}));
            assert_eq!(range(ccm_version(&gvk, &o, &c)), want, "{version}");
        }
        // image.tag wins; an unreadable tag falls back to the chart version.
        let (gvk, o) = flux("2.31.1", json!({"image": {"tag": "v1.35.0"}}));
        let v = ccm_version(&gvk, &o, &c).unwrap();
        assert_eq!(
            (v.min_minor, v.source.as_str()),
            (35, "values image.tag v1.35.0")
        );
        let (gvk, o) = flux("2.31.1", json!({"image": {"tag": "latest"}}));
        assert_eq!(range(ccm_version(&gvk, &o, &c)), Some((31, 31)));
        // Another chart: nothing.
        let (gvk, o) = obj(
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "x"},
            "spec": {"chart": {"spec": {"chart": "ingress-nginx", "version": "2.33.0"}}}}),
        );
        assert_eq!(range(ccm_version(&gvk, &o, &c)), None);
        // HelmChart and Argo CD.
        let (gvk, o) = obj(
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "occm"},
            "spec": {"chart": "openstack-cloud-controller-manager", "version": "2.32.0"}}),
        );
        assert_eq!(range(ccm_version(&gvk, &o, &c)), Some((32, 32)));
        let (gvk, o) = obj(
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "occm"},
            "spec": {"sources": [{"repoURL": "https://example/values", "targetRevision": "main"},
                {"chart": "openstack-cloud-controller-manager", "targetRevision": "2.35.0"}]}}),
        );
        assert_eq!(range(ccm_version(&gvk, &o, &c)), Some((35, 35)));
        // A version string that is not a plain version is never shown.
        assert_eq!(shown_version("2.33.0"), "2.33.0");
        assert_eq!(shown_version("2.33.0 secret"), "(not shown)");
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
            // Issue 23: other spellings of the same chart.
            "https://github.com/o/r/blob/main/openstack-cloud-controller-manager-2.31.1.tgz?raw=true",
            "https://example/openstack-cloud-controller-manager-2.31.1.tgz#sha256=abc",
            "https://example/openstack-cloud-controller-manager-2.31.1.TGZ",
            "https://example/openstack-cloud-controller-manager-v2.31.1.tgz",
            "https://example/openstack-cloud-controller-manager-2.31.1.tar.gz",
            "https://example/openstack%2Dcloud-controller-manager-2.31.1.tgz",
            "charts/openstack-cloud-controller-manager/.",
            "charts/openstack-cloud-controller-manager/templates/..",
            "charts/openstack-cloud-controller-manager//",
            "oci://registry.example/charts/openstack-cloud-controller-manager@sha256:0123",
        ] {
            assert!(chart_matches(r, &c), "{r}");
        }
        for r in [
            "openstack-cinder-csi",
            "openstack-cloud-controller-manager-extra",
            "https://example/openstack-cloud-controller-manager-extra-2.31.1.tgz",
            "charts/openstack-cloud-controller-manager/templates",
            "charts/openstack-cloud-controller-manager/..",
            "https://example/x.tgz?openstack-cloud-controller-manager",
            "",
            ".",
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
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.location, "spec.values.cloudConfig");
        let text = f.text.clone().unwrap().expose().to_owned();
        assert!(text.starts_with("[Global]\nregion = \"r\"\n\n[Networking]\n\n[LoadBalancer]\n\n"));
        assert_eq!(
            f.describe(Some(2)),
            "HelmRelease kube-system/occm spec.values.cloudConfig.global.region"
        );
        let mut doc = Document::parse(&text).unwrap();
        let edit = SERIAL_CALLS;
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
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        let ops = serial_calls_patch(&found[0]);
        assert_eq!(
            ops,
            json!([{"op":"add","path":"/spec/values","value":{"cloudConfig":{"loadBalancer":{"provider-requires-serial-api-calls":true}}}}])
        );
        let (gvk, o) = obj(
            json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
            "metadata":{"name":"occm"},
            "spec":{"chart":{"spec":{"chart":"openstack-cloud-controller-manager"}},"values":{"secret":{"create":false}}}}),
        );
        assert!(find(&gvk, &o, &charts(), &Cancel::never()).is_empty());
    }

    #[test]
    fn helmchart_values_content_edit_is_one_line() {
        let values = "# customer A\ncloudConfig:\n  loadBalancer:\n    subnet-id: s  # net\n  # trailing comment\ncontrollerExtraArgs: |-\n  - --concurrent-service-syncs=4\n";
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager","valuesContent": values}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        let f = &found[0];
        assert_eq!(
            f.describe(Some(6)),
            "HelmChart kube-system/occm spec.valuesContent, cloudConfig.loadBalancer.subnet-id (line 4 of the values)"
        );
        let mut doc = Document::parse(f.text.as_ref().unwrap().expose()).unwrap();
        let edit = SERIAL_CALLS;
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
    fn set_entries_growing_lists_past_the_limit_are_one_site_error() {
        // 20 entries padding lists to Helm's largest index: 1.3 million nulls before the limit.
        let set: serde_json::Map<String, Value> = (0..20)
            .map(|i| (format!("k{i:02}[65536]"), json!("1")))
            .collect();
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager","set": set}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let error = found[0].text.as_ref().expect_err("over the limit");
        assert!(
            matches!(error, SiteError::SetTooLarge { location, limit: strvals::SetLimit::Nodes }
                if location == "spec.set[\"k01[65536]\"]"),
            "{error:?}"
        );
        assert!(chart_values_all(&gvk, &o).is_empty());
    }

    #[test]
    fn argo_sources_values_object_and_string() {
        let contents = "cloudConfigContents: |\n  [Global]\n  region = r\n";
        let (gvk, o) = obj(
            json!({"apiVersion":"argoproj.io/v1alpha1","kind":"Application",
            "metadata":{"name":"occm","namespace":"argocd"},
            "spec":{"sources":[{"repoURL":"https://x","path":"other"},
                {"chart":"openstack-cloud-controller-manager","targetRevision":"2.31.1",
                 "helm":{"values": contents,
                 "valuesObject":{"cloudConfig":{"loadBalancer":{"provider-requires-serial-api-calls":false}}}}},
                {"chart":"openstack-cloud-controller-manager","targetRevision":"2.31.1",
                 "helm":{"values": contents}}]}}),
        );
        // Beside a valuesObject, Argo CD ignores the values string: it is not read.
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 2);
        assert_eq!(
            found[0].location,
            "spec.sources[1].helm.valuesObject.cloudConfig"
        );
        assert_eq!(
            found[1].location,
            "spec.sources[2].helm.values, cloudConfigContents"
        );
        assert_eq!(
            found[1].describe(Some(2)),
            "Application argocd/occm spec.sources[2].helm.values, cloudConfigContents line 2 (line 3 of the values)"
        );
        assert_eq!(
            found[1].trace(Some(2)),
            Anchor::TextLine {
                path: vec![
                    Seg::key("spec"),
                    Seg::key("sources"),
                    Seg::Index(2),
                    Seg::key("helm"),
                    Seg::key("values")
                ],
                line: 3
            }
        );
    }

    #[test]
    fn values_from_is_unseen_unless_spec_values_decide() {
        let release = |values: Value| {
            obj(
                json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":{"spec":{"chart":"openstack-cloud-controller-manager",
                    "version":"2.31.1"}},
                "valuesFrom":[{"kind":"Secret","name":"v","valuesKey":"x.yaml"},
                    {"kind":"ConfigMap","name":"o","targetPath":"a.b","optional":true}],
                "values": values}}),
            )
        };
        let (gvk, o) = release(json!({"cloudConfig":{"global":{"region":"r"}}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].text.clone().unwrap_err().to_string(),
            "spec.valuesFrom: values come from Secret v key x.yaml, ConfigMap o key values.yaml \
             at a.b (optional), which this run cannot see"
        );
        assert_eq!(found[0].pointer(), "/spec/valuesFrom");
        let doc = Document::parse("[LoadBalancer]\n").unwrap();
        assert!(found[0].patch(&doc, &[]).is_empty());
        // `spec.values` is merged last: its cloudConfigContents and secret switch are final.
        let (gvk, o) = release(json!({"cloudConfigContents":"[Global]\n"}));
        assert_eq!(
            find(&gvk, &o, &charts(), &Cancel::never())[0]
                .text
                .as_ref()
                .map(SecretText::expose),
            Ok("[Global]\n")
        );
        let (gvk, o) = release(json!({"secret":{"enabled":false}}));
        assert!(find(&gvk, &o, &charts(), &Cancel::never()).is_empty());
    }

    #[test]
    fn helmchart_set_overrides_values_content_and_takes_edits_of_its_keys() {
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager",
                "valuesContent":"cloudConfig:\n  global:\n    region: r\n",
                "set":{"cloudConfig.loadBalancer.lb-method":"ROUND_ROBIN",
                    "cloudConfig.global.region":"s", "replicas": 2}}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        let text = f.text.clone().unwrap().expose().to_owned();
        assert!(text.contains("region = \"s\""), "{text}");
        assert!(text.contains("lb-method = \"ROUND_ROBIN\""), "{text}");
        let line = text
            .lines()
            .position(|l| l.starts_with("lb-method"))
            .unwrap()
            + 1;
        assert_eq!(
            f.describe(Some(line)),
            "HelmChart kube-system/occm spec.set[\"cloudConfig.loadBalancer.lb-method\"]"
        );
        assert_eq!(
            f.trace(Some(line)),
            Anchor::Node(vec![
                Seg::key("spec"),
                Seg::key("set"),
                Seg::key("cloudConfig.loadBalancer.lb-method")
            ])
        );
        // An edit of a key `spec.set` sets is written there; any other into valuesContent.
        let doc = Document::parse(&text).unwrap();
        let edits = [
            IniEdit {
                section: "LoadBalancer",
                key: "LB-Method",
                value: "SOURCE_IP_PORT",
            },
            SERIAL_CALLS,
        ];
        let ops = serde_json::to_value(f.patch(&doc, &edits)).unwrap();
        assert_eq!(
            ops,
            json!([
                {"op":"replace","path":"/spec/set/cloudConfig.loadBalancer.lb-method","value":"SOURCE_IP_PORT"},
                {"op":"replace","path":"/spec/valuesContent","value":
                    "cloudConfig:\n  global:\n    region: r\n  loadBalancer:\n    provider-requires-serial-api-calls: true\n"}
            ])
        );
        // `secret.enabled` switched off by `--set`: no Secret, no site.
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm"},
            "spec":{"chart":"openstack-cloud-controller-manager","version":"2.31.1",
                "set":{"secret.enabled":"false"}}}));
        assert!(find(&gvk, &o, &charts(), &Cancel::never()).is_empty());
    }

    #[test]
    fn umbrella_chart_values_are_read_under_the_subchart_key() {
        let release = |chart: &str, values: Value| {
            obj(
                json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
                "metadata":{"name":"addons","namespace":"kube-system"},
                "spec":{"chart":{"spec":{"chart": chart}}, "values": values}}),
            )
        };
        let (gvk, o) = release(
            "cluster-addons",
            json!({"openstack-cloud-controller-manager":{"cloudConfig":{"global":{"region":"r"}}},
                "cloudConfig": {"ignored": true}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].location,
            "spec.values.openstack-cloud-controller-manager.cloudConfig"
        );
        let ops = serial_calls_patch(&found[0]);
        assert_eq!(
            ops,
            json!([{"op":"add","path":"/spec/values/openstack-cloud-controller-manager/cloudConfig/loadBalancer",
                "value":{"provider-requires-serial-api-calls":true}}])
        );
        // `enabled: false` switches the subchart off only if the umbrella's Chart.yaml (not
        // seen here) names it as a condition: read both ways, the site says what could.
        let (gvk, o) = release(
            "cluster-addons",
            json!({"openstack-cloud-controller-manager":{"enabled":false,"cloudConfig":{}},
                "tags": {"cloud": true}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let alternative = found[0].alternative.as_ref().expect("read both ways");
        assert_eq!(
            alternative.switch.as_deref(),
            Some("`openstack-cloud-controller-manager.enabled: false`")
        );
        assert_eq!((alternative.of, alternative.by_version), (2, false));
        // Another chart without the key: nothing.
        let (gvk, o) = release("podinfo", json!({"cloudConfig":{"global":{"region":"r"}}}));
        assert!(find(&gvk, &o, &charts(), &Cancel::never()).is_empty());
    }

    #[test]
    fn umbrella_values_strings_are_read_and_edited_under_the_subchart_key() {
        let values = "global: {}\nopenstack-cloud-controller-manager:\n  cloudConfig:\n    global:\n      region: r\n  controllerExtraArgs: |-\n    - --concurrent-service-syncs=4\ncloudConfig: {}\n";
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"addons","namespace":"kube-system"},
            "spec":{"chart":"cluster-addons","valuesContent": values,
                "set":{"openstack-cloud-controller-manager.cloudConfig.loadBalancer.lb-method":"ROUND_ROBIN",
                    "cloudConfig.loadBalancer.lb-method":"SOURCE_IP"}}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(
            f.location,
            "spec.valuesContent, openstack-cloud-controller-manager.cloudConfig"
        );
        let text = f.text.clone().unwrap().expose().to_owned();
        // Only the entry under the subchart key applies to the CCM.
        assert!(text.contains("lb-method = \"ROUND_ROBIN\""), "{text}");
        assert_eq!(
            f.describe(Some(2)),
            "HelmChart kube-system/addons spec.valuesContent, \
             openstack-cloud-controller-manager.cloudConfig.global.region (line 5 of the values)"
        );
        let ops = serial_calls_patch(f);
        let expected = values.replace(
            "      region: r\n",
            "      region: r\n    loadBalancer:\n      provider-requires-serial-api-calls: true\n",
        );
        assert_eq!(
            ops,
            json!([{"op":"replace","path":"/spec/valuesContent","value": expected}])
        );
        let (loc, ptr, args) = helm_controller_extra_args(&gvk, &o).unwrap();
        assert_eq!(
            (loc.as_str(), ptr.as_str()),
            (
                "spec.valuesContent, openstack-cloud-controller-manager.controllerExtraArgs",
                "/spec/valuesContent"
            )
        );
        assert_eq!(args, vec!["--concurrent-service-syncs=4"]);
        // Argo CD `helm.values` of an umbrella chart, with its cloudConfigContents.
        let (gvk, o) = obj(
            json!({"apiVersion":"argoproj.io/v1alpha1","kind":"Application",
            "metadata":{"name":"addons","namespace":"argocd"},
            "spec":{"source":{"chart":"cluster-addons","helm":{"values":
                "openstack-cloud-controller-manager:\n  cloudConfigContents: |\n    [Global]\n    region = r\n"}}}}),
        );
        // The subchart's version is not named here: chart versions 1.0.0–1.3.0 and 2.24.0
        // render the (empty) cloudConfig, later ones cloudConfigContents.
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 2);
        let alternative = found[1].alternative.as_ref().expect("an alternative");
        assert_eq!(alternative.versions, "1.4.0, 2.25.0 and later");
        assert_eq!((alternative.class, alternative.of), (1, 2));
        assert_eq!(
            found[1].describe(Some(2)),
            "Application argocd/addons spec.source.helm.values, \
             openstack-cloud-controller-manager.cloudConfigContents line 2 (line 4 of the values)"
        );
        // A subchart perhaps switched off in the string (by a tag, or a condition on a
        // `false` set on top): read both ways.
        for (values, set, why) in [
            (
                "tags: {cloud: false}\nopenstack-cloud-controller-manager: {}\n",
                json!({}),
                "`tags.cloud: false`",
            ),
            (
                "openstack-cloud-controller-manager: {}\n",
                json!({"ccm.on": "False"}),
                "`ccm.on: false` in spec.set",
            ),
        ] {
            let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
                "metadata":{"name":"addons","namespace":"kube-system"},
                "spec":{"chart": "addons", "valuesContent": values, "set": set}}));
            let found = find(&gvk, &o, &charts(), &Cancel::never());
            assert_eq!(found.len(), 1, "{values}");
            let alternative = found[0].alternative.as_ref().expect("read both ways");
            assert_eq!(alternative.switch.as_deref(), Some(why));
        }
        // The CCM chart's own settings below the subchart key are not switches.
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"addons","namespace":"kube-system"},
            "spec":{"chart": "addons",
                "valuesContent": "openstack-cloud-controller-manager: {serviceMonitor: {enabled: false}}\n",
                "set": {"openstack-cloud-controller-manager.serviceMonitor.x": "false"}}}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].alternative, None);
    }

    #[test]
    fn image_tags_pin_a_ccm_release() {
        let minor = |image: &str| image_version(image).map(|v| (v.min_minor, v.max_minor));
        assert_eq!(
            minor("registry.k8s.io/provider-os/occm:v1.24.0"),
            Some((24, 24))
        );
        assert_eq!(
            minor("registry:5000/occm:v1.31.2-rc.1@sha256:0123"),
            Some((31, 31))
        );
        assert_eq!(
            image_version("occm:v1.24.0").map(|v| v.source).as_deref(),
            Some("image tag v1.24.0")
        );
        for none in [
            "registry:5000/occm",
            "occm:latest",
            "occm@sha256:0123",
            "occm:1.24.0",
            "",
        ] {
            assert_eq!(minor(none), None, "{none}");
        }
    }

    #[test]
    fn k0s_cluster_config_chart_values() {
        let (gvk, o) = obj(
            json!({"apiVersion":"k0s.k0sproject.io/v1beta1","kind":"ClusterConfig",
            "metadata":{"name":"k0s","namespace":"kube-system"},
            "spec":{"extensions":{"helm":{"charts":[
                {"name":"tempo","chartname":"grafana/tempo","values":"cloudConfig: {}\n"},
                {"name":"occm","chartname":"openstack/openstack-cloud-controller-manager",
                 "values":"cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false\n"}]}}}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].describe(Some(
                found[0]
                    .text
                    .as_ref()
                    .unwrap()
                    .expose()
                    .lines()
                    .position(|l| l.starts_with("provider"))
                    .unwrap()
                    + 1
            )),
            "ClusterConfig kube-system/k0s spec.extensions.helm.charts[1].values, \
             cloudConfig.loadBalancer.provider-requires-serial-api-calls (line 3 of the values)"
        );
    }

    /// A k0s config with `others` other charts whose values mention the CCM chart (in a
    /// comment: no umbrella key), then the CCM chart with serial `false`.
    fn k0s_with_mentions(others: usize) -> (GroupVersionKind, DynamicObject) {
        let mut list: Vec<Value> = (0..others)
            .map(|i| {
                json!({"name": format!("app{i}"), "chartname": format!("apps/app{i}"),
                    "values": "# not openstack-cloud-controller-manager\na: 1\n"})
            })
            .collect();
        list.push(json!({"name": "occm", "chartname": "openstack/openstack-cloud-controller-manager",
            "values": "cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: false\n"}));
        obj(
            json!({"apiVersion": "k0s.k0sproject.io/v1beta1", "kind": "ClusterConfig",
            "metadata": {"name": "k0s", "namespace": "kube-system"},
            "spec": {"extensions": {"helm": {"charts": list}}}}),
        )
    }

    #[test]
    fn k0s_umbrella_keys_spelled_with_escapes_pass_the_prefilter() {
        // a: invalid YAML that never names the chart (not parsed, so no error). b: its key
        // spells the chart only with an escape, which the prefilter reads.
        let (gvk, o) = obj(json!({"apiVersion": "k0s.k0sproject.io/v1beta1",
            "kind": "ClusterConfig", "metadata": {"name": "k0s", "namespace": "kube-system"},
            "spec": {"extensions": {"helm": {"charts": [
                {"name": "a", "chartname": "apps/a", "values": "a: [\n"},
                {"name": "b", "chartname": "apps/b",
                 "values": "\"openstack\\x2dcloud-controller-manager\": {cloudConfig: {}}\n"}]}}}}));
        let places = values_places(&gvk, &o, &charts(), &Cancel::never());
        // Only b, whose escaped key spells the chart (found by the prefilter's escape reading).
        assert_eq!(places.len(), 1);
        assert_eq!(
            places[0].alias.as_deref(),
            Some("openstack-cloud-controller-manager")
        );
        assert_eq!(
            display(&places[0].path),
            "spec.extensions.helm.charts[1].values"
        );
    }

    #[test]
    fn k0s_values_mentioning_the_chart_past_the_carrier_cap_are_not_parsed() {
        let (gvk, o) = k0s_with_mentions(MAX_CARRIERS_PER_OBJECT);
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert!(
            found[0]
                .text
                .as_ref()
                .is_ok_and(|t| t.expose().contains("false")),
            "{:?}",
            found[0].text
        );
        let (gvk, o) = k0s_with_mentions(MAX_CARRIERS_PER_OBJECT + 1);
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        assert_eq!(found.len(), 1);
        assert!(
            matches!(&found[0].text, Err(SiteError::TooManyCarriers { count, .. })
                if *count == MAX_CARRIERS_PER_OBJECT + 2),
            "{:?}",
            found[0].text
        );
    }

    #[test]
    fn set_values_typed_as_helm_types_them() {
        assert_eq!(strvals::set_typed("False"), json!(false));
        assert_eq!(strvals::set_typed("12"), json!(12));
        assert_eq!(strvals::set_typed("012"), json!("012"));
        assert_eq!(strvals::set_typed("x"), json!("x"));
        // Go's EqualFold: any case, and the long s folds to s.
        assert_eq!(strvals::set_typed("TRUE"), json!(true));
        assert_eq!(strvals::set_typed("nUlL"), json!(null));
        assert_eq!(strvals::set_typed("fal\u{17F}e"), json!(false));
        assert_eq!(strvals::set_typed("fals"), json!("fals"));
        assert_eq!(strvals::set_typed("falsee"), json!("falsee"));
        // helm-controller's typedVal lowercases: only these three words are typed strings.
        assert!(helm_controller_typed("FaLsE") && helm_controller_typed("NULL"));
        assert!(!helm_controller_typed("1") && !helm_controller_typed("off"));
    }

    #[test]
    fn set_entries_follow_helm_strvals_list_indexes_and_unreadable_paths() {
        let chart = |set: Value| {
            obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
                "metadata":{"name":"occm","namespace":"kube-system"},
                "spec":{"chart":"openstack-cloud-controller-manager",
                    "valuesContent":"cloudConfig:\n  loadBalancer:\n    provider-requires-serial-api-calls: true\n",
                    "set": set}}))
        };
        // List paths outside cloudConfig are followed and change nothing it renders.
        let (gvk, o) = chart(json!({"tolerations[0].key": "x",
            "extraEnv[1].provider-requires-serial-api-calls": "false"}));
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        let text = found[0].text.clone().unwrap().expose().to_owned();
        assert!(
            text.contains("provider-requires-serial-api-calls = \"true\""),
            "{text}"
        );
        // A list value and a comma escaped by helm-controller stay one value.
        let (gvk, o) = chart(json!({"cloudConfig.global.region": "a,b"}));
        let text = find(&gvk, &o, &charts(), &Cancel::never())[0]
            .text
            .clone()
            .unwrap()
            .expose()
            .to_owned();
        assert!(text.contains("region = \"a,b\""), "{text}");
        // A path Helm cannot read: the site says so and nothing is edited.
        for key in ["cloudConfig.loadBalancer[x]", "cloudConfig..a", "a[0]b"] {
            let (gvk, o) = chart(json!({ key: "false" }));
            let found = find(&gvk, &o, &charts(), &Cancel::never());
            assert_eq!(found.len(), 1, "{key}");
            let err = found[0].text.clone().unwrap_err();
            assert!(matches!(err, SiteError::SetEntry { .. }), "{key}: {err}");
            assert!(
                err.to_string().starts_with(&format!(
                    "spec.set[\"{key}\"] is not a --set entry Helm can read"
                )),
                "{err}"
            );
            assert_eq!(
                found[0].pointer(),
                pointer(&[Seg::key("spec"), Seg::key("set"), Seg::key(key)]).to_string()
            );
            let doc = Document::parse("[LoadBalancer]\n").unwrap();
            assert!(found[0].patch(&doc, &[SERIAL_CALLS]).is_empty());
        }
        // A key through a value of another type: Helm fails too.
        let (gvk, o) =
            chart(json!({"cloudConfig.loadBalancer.provider-requires-serial-api-calls.x": "1"}));
        assert!(matches!(
            find(&gvk, &o, &charts(), &Cancel::never())[0].text,
            Err(SiteError::SetEntry { .. })
        ));
    }

    /// A values map is read where it is: its `controllerExtraArgs` named by the map's path, and
    /// nothing for values that set none, or that are no map.
    #[test]
    fn controller_extra_args_in_a_values_map_are_named_by_its_path() {
        let release = |values: Value| {
            obj(
                json!({"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease",
                "metadata":{"name":"occm","namespace":"kube-system"},
                "spec":{"chart":{"spec":{"chart":"openstack-cloud-controller-manager"}},
                    "values": values}}),
            )
        };
        let (gvk, o) = release(json!({"controllerExtraArgs": ["--concurrent-service-syncs=3"]}));
        assert_eq!(
            helm_controller_extra_args_all(&gvk, &o),
            [(
                "spec.values.controllerExtraArgs".to_owned(),
                "/spec/values/controllerExtraArgs".to_owned(),
                vec!["--concurrent-service-syncs=3".to_owned()]
            )]
        );
        for values in [
            json!({"cloudConfig": {}}),
            json!(["controllerExtraArgs"]),
            json!("controllerExtraArgs"),
        ] {
            let (gvk, o) = release(values.clone());
            assert_eq!(helm_controller_extra_args_all(&gvk, &o), [], "{values}");
        }
    }

    #[test]
    fn controller_extra_args_set_on_top_point_at_the_entry() {
        let (gvk, o) = obj(json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart",
            "metadata":{"name":"occm","namespace":"kube-system"},
            "spec":{"chart":"openstack-cloud-controller-manager",
                "valuesContent":"controllerExtraArgs: |-\n  - --concurrent-service-syncs=1\n",
                "set":{"controllerExtraArgs":"- --concurrent-service-syncs=4"}}}));
        let (loc, ptr, args) = helm_controller_extra_args(&gvk, &o).unwrap();
        assert_eq!(
            (loc.as_str(), ptr.as_str()),
            (
                "spec.set[\"controllerExtraArgs\"]",
                "/spec/set/controllerExtraArgs"
            )
        );
        assert_eq!(args, vec!["--concurrent-service-syncs=4"]);
        // Argo CD parameters, also with a list index.
        let (gvk, o) = obj(
            json!({"apiVersion":"argoproj.io/v1alpha1","kind":"Application",
            "metadata":{"name":"occm","namespace":"argocd"},
            "spec":{"source":{"chart":"openstack-cloud-controller-manager",
                "helm":{"parameters":[{"name":"controllerExtraArgs[0]",
                    "value":"--concurrent-service-syncs=4"}]}}}}),
        );
        let (loc, ptr, args) = helm_controller_extra_args(&gvk, &o).unwrap();
        assert_eq!(
            (loc.as_str(), ptr.as_str()),
            (
                "spec.source.helm.parameters[0] (controllerExtraArgs[0])",
                "/spec/source/helm/parameters/0/value"
            )
        );
        assert_eq!(args, vec!["--concurrent-service-syncs=4"]);
    }

    #[test]
    fn unreadable_values_are_site_errors_without_content() {
        let (gvk, o) = obj(
            json!({"apiVersion":"helm.cattle.io/v1","kind":"HelmChart","metadata":{"name":"x"},
            "spec":{"chart":"openstack-cloud-controller-manager","valuesContent":"a: [secret-value\n"}}),
        );
        let found = find(&gvk, &o, &charts(), &Cancel::never());
        let err = found[0].text.clone().unwrap_err().to_string();
        assert!(
            err.starts_with("spec.valuesContent is not valid YAML"),
            "{err}"
        );
        assert!(!err.contains("secret-value"));
    }
}
