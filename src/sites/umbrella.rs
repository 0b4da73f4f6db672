//! Whether an umbrella chart renders its CCM subchart: Helm switches a dependency with the
//! umbrella's `Chart.yaml`, not with a `<key>.enabled` convention.
//!
//! Helm v3.17.2 (helm/helm commit cc0bbbd6d6276b83880042c1ecb34087e84d41eb),
//! `pkg/chartutil/dependencies.go`:
//! - `processDependencyEnabled` sets every dependency enabled, then applies the tags, then the
//!   conditions, on the umbrella's values coalesced with its defaults; a disabled dependency
//!   is removed (nothing of it renders).
//! - `processDependencyTags`: the `tags` table at the values' root; a dependency with a listed
//!   tag set `true` stays enabled, one whose set tags are all `false` (and at least one is) is
//!   disabled; a non-bool tag is ignored.
//! - `processDependencyConditions`: `condition` is split at `,` after trimming the whole
//!   string (each path keeps its own spaces); the first path whose value is a bool decides;
//!   a non-bool or missing value goes on to the next; none deciding leaves the tags' answer.
//! - `getAliasDependency`: `alias` renames the subchart, so its values are under the alias.
//!
//! `pkg/chartutil/values.go` `PathValue`: a dotted path whose last key holds a table does not
//! resolve.
//!
//! Where the umbrella's `Chart.yaml` is not visible (the webhook, a GitOps object naming an
//! umbrella chart), nothing is guessed: [`could_switch_off`] names the visible values a
//! condition or tag could read as `false`, and the site is then read in both states.

use serde_json::Value;

use super::path::{display, shown_entry};
use crate::yaml::Seg;

/// One dependency of an umbrella chart as its `Chart.yaml` declares it: what switches it
/// and the key its values are under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    /// The key of its values in the umbrella's values: `alias` when set, else `name`.
    pub key: String,
    /// The `condition` field as written (a comma-separated list of value paths).
    pub condition: Option<String>,
    /// The `tags` field.
    pub tags: Vec<String>,
    /// The `version` field (a version or a range), which decides the subchart's generation.
    pub version: Option<String>,
}

impl Dependency {
    /// A `dependencies[]` entry of a `Chart.yaml`: the chart's `name` and the dependency, or
    /// None without a name. A `condition` or tag that is not a string is left out (Helm's
    /// loader refuses such a `Chart.yaml`, so nothing renders either way).
    pub fn from_entry(entry: &Value) -> Option<(String, Dependency)> {
        let name = entry.get("name").and_then(Value::as_str)?;
        let key = entry
            .get("alias")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
            .unwrap_or(name);
        let condition = entry
            .get("condition")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let version = entry
            .get("version")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let tags = entry
            .get("tags")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        Some((
            name.to_owned(),
            Dependency {
                key: key.to_owned(),
                condition,
                tags,
                version,
            },
        ))
    }

    /// Whether Helm renders this dependency with the umbrella's (coalesced) `values`: the
    /// tags first, then the first condition path that resolves to a bool.
    pub fn switched_on(&self, values: &Value) -> bool {
        let mut on = true;
        if let Some(tags) = values.get("tags").and_then(Value::as_object) {
            let set: Vec<bool> = self
                .tags
                .iter()
                .filter_map(|t| tags.get(t).and_then(Value::as_bool))
                .collect();
            on = set.contains(&true) || set.is_empty();
        }
        let condition = self.condition.as_deref().unwrap_or("").trim();
        for path in condition.split(',').filter(|p| !p.is_empty()) {
            if let Some(decided) = path_value(values, path).and_then(Value::as_bool) {
                on = decided;
                break;
            }
        }
        on
    }
}

/// Helm's `Values.PathValue`: the value at a dotted `path`, None when a key on the way is
/// missing or not a table, or when the value itself is a table.
fn path_value<'a>(values: &'a Value, path: &str) -> Option<&'a Value> {
    let mut keys: Vec<&str> = path.split('.').collect();
    let last = keys.pop()?;
    let table = keys
        .into_iter()
        .try_fold(values, |v, k| v.get(k).filter(|t| t.is_object()))?;
    table.as_object()?.get(last).filter(|v| !v.is_object())
}

/// Most values [`could_switch_off`] looks at: values are capped where they are read, this
/// keeps the walk bounded whatever the caller passes.
const MAX_SWITCH_SCAN_NODES: usize = 10_000;

/// Where the umbrella's `Chart.yaml` is not visible: the values at the umbrella's root
/// (`values`, then any set on top in `more`, each named by where it is) that a `condition` or
/// a tag of the dependency under `key` could read as `false`, for messages; None when none
/// could (the subchart is then rendered whatever the `Chart.yaml` says, but for a default of
/// the umbrella's own values, which no delivery shows).
///
/// A condition may name any path, so every `false` counts, but those inside the subchart's
/// own values other than its `enabled`: those are the CCM chart's settings
/// (`secret.enabled`, `serviceMonitor.enabled`, …), which no umbrella switches on.
pub fn could_switch_off(key: &str, values: &[(&str, &Value)]) -> Option<String> {
    let mut found: Vec<String> = Vec::new();
    let mut seen = 0usize;
    for (source, root) in values {
        let mut stack: Vec<(Vec<Seg>, &Value)> = vec![(Vec::new(), root)];
        while let Some((path, value)) = stack.pop() {
            seen += 1;
            if seen > MAX_SWITCH_SCAN_NODES {
                break;
            }
            match value {
                Value::Object(map) => {
                    for (k, v) in map.iter().rev() {
                        let in_subchart = path.is_empty() && k == key;
                        if in_subchart {
                            if v.get("enabled") == Some(&Value::Bool(false)) {
                                found.push(named(source, &[Seg::key(key), Seg::key("enabled")]));
                            }
                            continue;
                        }
                        let mut next = path.clone();
                        next.push(Seg::key(k));
                        stack.push((next, v));
                    }
                }
                // A root that is `false` has no path a condition could name.
                Value::Bool(false) if !path.is_empty() => found.push(named(source, &path)),
                // A condition path has no index: nothing in a list is a switch.
                _ => {}
            }
        }
    }
    if found.is_empty() {
        return None;
    }
    // The subchart's own `enabled` and the tags first: those are the usual switches.
    found.sort_by_key(|f| {
        if f.contains(&format!("{}.enabled", shown_entry(key))) {
            0
        } else if f.contains("`tags.") {
            1
        } else {
            2
        }
    });
    let more = found.len().saturating_sub(2);
    found.truncate(2);
    let mut said = found.join(", ");
    if more > 0 {
        said.push_str(&format!(" and {more} more"));
    }
    Some(said)
}

/// How a value that could be a switch is named: `` `a.b: false` `` (and where it is set,
/// when not in the values themselves).
fn named(source: &str, path: &[Seg]) -> String {
    let path = display(path);
    if source.is_empty() {
        format!("`{path}: false`")
    } else {
        format!("`{path}: false` in {source}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Values whose `zz: false` is the `nodes`-th value the switch scan visits: the root, then
    /// `nodes - 2` numbers (keys sort before `zz`).
    fn false_at_node(nodes: usize) -> Value {
        let mut map = serde_json::Map::new();
        for i in 0..nodes - 2 {
            map.insert(format!("k{i:05}"), json!(1));
        }
        map.insert("zz".into(), json!(false));
        Value::Object(map)
    }

    #[test]
    fn the_switch_scan_stops_after_its_node_budget() {
        let last_seen = false_at_node(MAX_SWITCH_SCAN_NODES);
        assert_eq!(
            could_switch_off("occm", &[("", &last_seen)]).as_deref(),
            Some("`zz: false`")
        );
        assert_eq!(could_switch_off("occm", &[("", &json!(false))]), None);
        assert_eq!(
            could_switch_off("occm", &[("", &json!({"l": [false, {"x": false}]}))]),
            None
        );
        let past = false_at_node(MAX_SWITCH_SCAN_NODES + 1);
        assert_eq!(could_switch_off("occm", &[("", &past)]), None);
        // The budget is shared by every source, not one per source.
        let small = json!({"a": 1});
        let shared = false_at_node(MAX_SWITCH_SCAN_NODES - 1);
        assert_eq!(
            could_switch_off("occm", &[("", &small), ("spec.set", &shared)]),
            None
        );
    }

    fn dep(condition: Option<&str>, tags: &[&str]) -> Dependency {
        Dependency {
            key: "occm".into(),
            condition: condition.map(str::to_owned),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            version: None,
        }
    }

    #[test]
    fn conditions_as_helm_reads_them() {
        let values = json!({"a": {"on": false, "text": "false", "table": {"x": 1}},
            "b": {"on": true}, "top": false});
        // None, missing, non-bool and table paths leave it on.
        for condition in [None, Some(""), Some("x.y"), Some("a.text"), Some("a.table")] {
            assert!(dep(condition, &[]).switched_on(&values), "{condition:?}");
        }
        assert!(!dep(Some("a.on"), &[]).switched_on(&values));
        assert!(!dep(Some("top"), &[]).switched_on(&values));
        assert!(dep(Some("b.on"), &[]).switched_on(&values));
        // The first that resolves to a bool decides.
        assert!(dep(Some("a.text,b.on,a.on"), &[]).switched_on(&values));
        assert!(!dep(Some("x.y,a.on,b.on"), &[]).switched_on(&values));
        // The whole list is trimmed, not each path: " a.on" names the key " a".
        assert!(dep(Some("b.x, a.on"), &[]).switched_on(&values));
        assert!(!dep(Some("  a.on  "), &[]).switched_on(&values));
        // A path through a non-table does not resolve.
        assert!(dep(Some("top.x"), &[]).switched_on(&values));
    }

    #[test]
    fn tags_as_helm_reads_them_and_conditions_override_them() {
        let values = json!({"tags": {"cloud": false, "os": true, "text": "no"}, "c": {"on": true}});
        assert!(!dep(None, &["cloud"]).switched_on(&values));
        assert!(dep(None, &["cloud", "os"]).switched_on(&values));
        assert!(!dep(None, &["cloud", "missing", "text"]).switched_on(&values));
        assert!(dep(None, &["missing", "text"]).switched_on(&values));
        assert!(dep(Some("c.on"), &["cloud"]).switched_on(&values));
        assert!(!dep(Some("c.missing"), &["cloud"]).switched_on(&values));
        // `tags` that is not a table is ignored.
        assert!(dep(None, &["cloud"]).switched_on(&json!({"tags": [{"cloud": false}]})));
    }

    #[test]
    fn dependency_entries_name_the_key_and_the_switches() {
        let (name, d) = Dependency::from_entry(&json!({"name": "ccm-chart", "alias": "occm",
            "condition": "occm.enabled", "tags": ["cloud", 3], "version": "~2.30.0"}))
        .expect("an entry");
        assert_eq!(name, "ccm-chart");
        assert_eq!(
            d,
            Dependency {
                version: Some("~2.30.0".into()),
                ..dep(Some("occm.enabled"), &["cloud"])
            }
        );
        let (_, d) = Dependency::from_entry(&json!({"name": "n", "alias": ""})).expect("entry");
        assert_eq!((d.key.as_str(), d.condition, d.tags.len()), ("n", None, 0));
        assert!(Dependency::from_entry(&json!({"alias": "a"})).is_none());
    }

    #[test]
    fn what_could_switch_the_subchart_off_where_chart_yaml_is_unseen() {
        assert_eq!(
            could_switch_off("occm", &[("", &json!({"occm": {"x": 1}}))]),
            None
        );
        // The subchart's own settings are not switches; its `enabled` is.
        let inner = json!({"occm": {"secret": {"enabled": false}, "enabled": true}});
        assert_eq!(could_switch_off("occm", &[("", &inner)]), None);
        let values = json!({"a": {"b": false}, "tags": {"cloud": false}, "list": [false],
            "occm": {"enabled": false}, "z": false});
        assert_eq!(
            could_switch_off("occm", &[("", &values)]).as_deref(),
            Some("`occm.enabled: false`, `tags.cloud: false` and 2 more")
        );
        let set = json!({"switches": {"ccm": false}});
        assert_eq!(
            could_switch_off("occm", &[("", &json!({})), ("spec.set", &set)]).as_deref(),
            Some("`switches.ccm: false` in spec.set")
        );
    }
}
