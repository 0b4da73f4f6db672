//! Release-derived service annotations: what the target OpenStack release implies for the
//! annotations on openstack-k8s-operators service custom resources.
//!
//! ```text
//! policies/release-catalog.yaml ─► catalog::ReleaseCatalog (mappings + static release table)
//! OpenStackVersion (live) ─► watcher::run ─► Snapshot (per namespace) ─► Engine (Arc, swapped)
//!                                            rules::release_annotations reads both, no IO
//! ```
//!
//! Which `ServiceDefaults` apply to a namespace (see [`Snapshot::basis`]):
//!
//! * **One initialized OpenStackVersion, no update in progress**: its
//!   `status.serviceDefaults`, exactly what openstack-operator reads when it writes the Glance
//!   CR (`internal/openstack/glance.go` l.254-280). An empty or absent `serviceDefaults`
//!   (legacy: the target release has no entry in `availableServiceDefaults`) gives `"false"`
//!   for every mapped annotation, as the operator does.
//! * **Minor update in progress** (`status.deployedVersion` set and ≠ `spec.targetVersion`):
//!   the operator reconciles service CRs only in its control-plane stage, so until then they
//!   keep the deployed release's values. A missing annotation gets the deployed release's
//!   value (`status.availableServiceDefaults[deployedVersion]`, empty if absent); the
//!   deployed and the target value are both accepted.
//! * **OpenStackVersion not initialized yet** (no `status.availableVersion`): the operator
//!   does not reconcile services before the version is initialized, so nothing is implied.
//! * **More than one OpenStackVersion in the namespace** (the operator supports one): nothing
//!   is implied and a warning says why.
//! * **No OpenStackVersion**: the static table, only where a policy's
//!   `params.namespaceReleases` names the release for the namespace; otherwise nothing.

pub mod catalog;
pub mod metrics;
pub mod watcher;

use std::collections::BTreeMap;

use kube::core::DynamicObject;
use serde::{Deserialize, Serialize};

pub use catalog::{CatalogError, Mapping, ReleaseCatalog, StaticRelease, ValueRule};

/// The `ServiceDefaults` of one release: field name (`glanceWsgi`, …) → string value. The
/// CRD declares every field as a string; values are `"true"`/`"false"` or a version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct ServiceDefaults(BTreeMap<String, String>);

/// Empty defaults: what the operator uses when a release has no entry.
static EMPTY_DEFAULTS: ServiceDefaults = ServiceDefaults(BTreeMap::new());

impl ServiceDefaults {
    /// Defaults from `(field, value)` pairs.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self(
            pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        )
    }

    /// The value of one field, if set.
    pub fn get(&self, field: &str) -> Option<&str> {
        self.0.get(field).map(String::as_str)
    }

    /// The fields that are set.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Keeps the string-valued members of a JSON object; anything else counts as absent
    /// (the CRD schema only admits strings, so this is defensive).
    fn from_json(value: &serde_json::Value) -> Self {
        let map = value
            .as_object()
            .map(|o| {
                o.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        Self(map)
    }
}

/// Go `strconv.ParseBool`, which glance-operator uses for these annotations (lib-common
/// `annotations.GetBoolFromAnnotation`). Exactly these strings parse; everything else,
/// including `yes`, `on` and surrounding spaces, is an error.
pub fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// The strings [`go_parse_bool`] accepts, for messages.
pub const GO_BOOL_ACCEPTED: &str = "1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False";

/// What stackgate keeps of one `OpenStackVersion` (core.openstack.org/v1beta1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionState {
    /// `spec.targetVersion`.
    pub target_version: Option<String>,
    /// `status.deployedVersion`.
    pub deployed_version: Option<String>,
    /// `status.availableVersion`; set by the version controller in the same pass that
    /// computes `serviceDefaults`, so it marks an initialized object.
    pub available_version: Option<String>,
    /// `status.serviceDefaults` (defaults of the target version; None when absent).
    pub service_defaults: Option<ServiceDefaults>,
    /// `status.availableServiceDefaults` (version → defaults; a null entry counts as empty).
    pub available_service_defaults: BTreeMap<String, ServiceDefaults>,
}

/// Why an object could not be read as an `OpenStackVersion`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No `metadata.namespace` (the kind is namespaced).
    #[error("OpenStackVersion {name:?} has no namespace")]
    NoNamespace {
        /// `metadata.name`.
        name: String,
    },
    /// No `metadata.name`.
    #[error("an OpenStackVersion without a name")]
    NoName,
}

impl VersionState {
    /// Reads an `OpenStackVersion` object (as the watcher or a test fixture delivers it) and
    /// returns `(namespace, name, state)`. Lenient about content: fields of the wrong type
    /// count as absent, so one odd object cannot stop the watcher.
    pub fn from_object(obj: &DynamicObject) -> Result<(String, String, Self), DecodeError> {
        let name = obj.metadata.name.clone().ok_or(DecodeError::NoName)?;
        let namespace = obj
            .metadata
            .namespace
            .clone()
            .ok_or_else(|| DecodeError::NoNamespace { name: name.clone() })?;
        let data = &obj.data;
        let string = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        let status = &data["status"];
        let state = Self {
            target_version: string(&data["spec"]["targetVersion"]),
            deployed_version: string(&status["deployedVersion"]),
            available_version: string(&status["availableVersion"]),
            service_defaults: status
                .get("serviceDefaults")
                .filter(|v| !v.is_null())
                .map(ServiceDefaults::from_json),
            available_service_defaults: status["availableServiceDefaults"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| (k.clone(), ServiceDefaults::from_json(v)))
                        .collect()
                })
                .unwrap_or_default(),
        };
        Ok((namespace, name, state))
    }

    /// A minor update is in progress: a deployed version exists and differs from the target.
    pub fn updating(&self) -> bool {
        matches!((&self.deployed_version, &self.target_version), (Some(d), Some(t)) if d != t)
    }
}

/// An immutable view of every `OpenStackVersion` the watcher knows, by namespace and name.
/// The engine holds it in an `Arc`; the watcher publishes a new one on every change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    versions: BTreeMap<String, BTreeMap<String, VersionState>>,
}

/// The `ServiceDefaults` that apply to one namespace, and where they come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis<'a> {
    /// One initialized `OpenStackVersion`, no update in progress.
    Live {
        /// Its name.
        name: &'a str,
        /// `spec.targetVersion` (empty if unset).
        target: &'a str,
        /// `status.serviceDefaults` (empty if absent).
        defaults: &'a ServiceDefaults,
    },
    /// A minor update from `deployed` to `target` is in progress.
    Updating {
        /// The `OpenStackVersion` name.
        name: &'a str,
        /// `status.deployedVersion`.
        deployed: &'a str,
        /// `spec.targetVersion`.
        target: &'a str,
        /// `status.availableServiceDefaults[deployed]` (empty if absent).
        deployed_defaults: &'a ServiceDefaults,
        /// `status.serviceDefaults` (empty if absent).
        target_defaults: &'a ServiceDefaults,
    },
    /// The `OpenStackVersion` is not initialized yet: nothing is implied.
    Pending {
        /// Its name.
        name: &'a str,
    },
    /// Several `OpenStackVersion`s in one namespace: nothing is implied.
    Ambiguous {
        /// Their names, sorted.
        names: [&'a str; 2],
        /// How many there are.
        count: usize,
    },
    /// No `OpenStackVersion`; a policy names this release from the static table.
    Static {
        /// Release name.
        release: &'a str,
        /// Its defaults.
        defaults: &'a ServiceDefaults,
    },
    /// Nothing known about the namespace: admit unchanged.
    Unknown,
}

impl Snapshot {
    /// No `OpenStackVersion` at all (`--kube off`, or before the first list).
    pub fn empty() -> Self {
        Self::default()
    }

    /// A snapshot of the given `(namespace, name, state)` triples.
    pub fn from_versions(
        versions: impl IntoIterator<Item = (String, String, VersionState)>,
    ) -> Self {
        let mut s = Self::default();
        for (ns, name, state) in versions {
            s.insert(ns, name, state);
        }
        s
    }

    /// Adds or replaces one object.
    pub fn insert(&mut self, namespace: String, name: String, state: VersionState) {
        self.versions
            .entry(namespace)
            .or_default()
            .insert(name, state);
    }

    /// Removes one object; returns whether it was there.
    pub fn remove(&mut self, namespace: &str, name: &str) -> bool {
        let Some(names) = self.versions.get_mut(namespace) else {
            return false;
        };
        let removed = names.remove(name).is_some();
        if names.is_empty() {
            self.versions.remove(namespace);
        }
        removed
    }

    /// Number of `OpenStackVersion` objects.
    pub fn len(&self) -> usize {
        self.versions.values().map(BTreeMap::len).sum()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// The objects in one namespace, by name.
    pub fn namespace(&self, namespace: &str) -> Option<&BTreeMap<String, VersionState>> {
        self.versions.get(namespace)
    }

    /// Which defaults apply to `namespace`: the live object when there is one, else the
    /// static release `static_release` names (from a policy's `namespaceReleases`).
    pub fn basis<'a>(
        &'a self,
        namespace: &str,
        static_release: Option<(&'a str, &'a StaticRelease)>,
    ) -> Basis<'a> {
        let Some(names) = self.versions.get(namespace).filter(|m| !m.is_empty()) else {
            return match static_release {
                Some((release, entry)) => Basis::Static {
                    release,
                    defaults: &entry.service_defaults,
                },
                None => Basis::Unknown,
            };
        };
        let mut iter = names.iter();
        let (first, state) = match (iter.next(), iter.next()) {
            (Some(one), None) => one,
            (Some((a, _)), Some((b, _))) => {
                return Basis::Ambiguous {
                    names: [a.as_str(), b.as_str()],
                    count: names.len(),
                };
            }
            (None, _) => return Basis::Unknown,
        };
        if state.available_version.is_none() {
            return Basis::Pending { name: first };
        }
        let target_defaults = state.service_defaults.as_ref().unwrap_or(&EMPTY_DEFAULTS);
        let target = state.target_version.as_deref().unwrap_or("");
        match &state.deployed_version {
            Some(deployed) if state.updating() => Basis::Updating {
                name: first,
                deployed,
                target,
                deployed_defaults: state
                    .available_service_defaults
                    .get(deployed)
                    .unwrap_or(&EMPTY_DEFAULTS),
                target_defaults,
            },
            _ => Basis::Live {
                name: first,
                target,
                defaults: target_defaults,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_parse_bool_is_exact() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(go_parse_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(go_parse_bool(f), Some(false), "{f}");
        }
        for bad in [
            "", "yes", "on", "tRUE", " true", "true ", "2", "no", "off", "ｔrue",
        ] {
            assert_eq!(go_parse_bool(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn accepted_list_matches_the_parser() {
        for word in GO_BOOL_ACCEPTED.split(", ") {
            assert!(go_parse_bool(word).is_some(), "{word}");
        }
        assert_eq!(GO_BOOL_ACCEPTED.split(", ").count(), 12);
    }

    #[test]
    fn remove_drops_empty_namespaces() {
        let mut s = Snapshot::empty();
        s.insert("a".into(), "x".into(), VersionState::default());
        assert_eq!(s.len(), 1);
        assert!(s.remove("a", "x"));
        assert!(!s.remove("a", "x"));
        assert!(s.is_empty());
    }
}
