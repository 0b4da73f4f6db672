//! The release catalog: policy data (a `ReleaseCatalog` document under `policies/`) that says
//! which `ServiceDefaults` field drives which annotation on which service kind, and a static
//! release table for clusters or CLI runs without a live `OpenStackVersion`.
//!
//! Facts it encodes (domain-facts §4): openstack-operator `internal/openstack/glance.go`
//! l.254-280 writes `glance.openstack.org/wsgi` = `"true"` only when
//! `status.serviceDefaults.glanceWsgi == "true"`, else `"false"` (absent too), and
//! `glance.openstack.org/location-api` likewise from `glanceLocationAPI`. glance-operator
//! (`internal/controller/glance_controller.go` l.849-868) reads them with Go
//! `strconv.ParseBool`; a missing `wsgi` means WSGI, a missing `location-api` means off.
//! Likewise `manila.openstack.org/sharev1` from `manilaSharev1` (§9.2; manila-operator
//! `IsShareV1Enabled`: missing means on). `rabbitmqVersion` stays unmapped: it sets the
//! RabbitMq CR's `spec.targetVersion`, not an annotation.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::ServiceDefaults;

/// The document kind in policy files.
pub const KIND: &str = "ReleaseCatalog";

/// Why a release catalog or a policy's release parameters are not usable. The loader wraps
/// it with the file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The document's `kind` is not `ReleaseCatalog`.
    #[error("kind must be {KIND}")]
    Kind,
    /// A mapping is incomplete or malformed.
    #[error("mappings[{index}] ({field}): {message}")]
    Mapping {
        /// Position in `mappings`.
        index: usize,
        /// The `ServiceDefaults` field it names.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A field is listed both as mapped and as unmapped, or twice as unmapped.
    #[error("unmapped field {field:?}: {message}")]
    Unmapped {
        /// The field.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A static release is malformed.
    #[error("releases[{release:?}]: {message}")]
    Release {
        /// The release name.
        release: String,
        /// What is wrong.
        message: String,
    },
    /// A policy's `params.namespaceReleases` names a release the table does not have.
    #[error(
        "policy {policy}: params.namespaceReleases[{namespace:?}] names release {release:?}, \
         which is not in the ReleaseCatalog static table (known: {known}); add it under \
         `releases:` (use `serviceDefaults: {{}}` for a release from before ServiceDefaults)"
    )]
    UnknownRelease {
        /// Policy name.
        policy: String,
        /// Namespace key.
        namespace: String,
        /// The release named.
        release: String,
        /// Releases the table has, comma-separated.
        known: String,
    },
}

/// A `ReleaseCatalog` document.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReleaseCatalog {
    /// Always `stackgate.dev/v1alpha1`.
    pub api_version: String,
    /// Always [`KIND`].
    pub kind: String,
    /// Where the mapping comes from (code references), for humans.
    pub source: String,
    /// `ServiceDefaults` fields that drive an annotation on a service custom resource.
    pub mappings: Vec<Mapping>,
    /// `ServiceDefaults` fields deliberately not mapped, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmapped: Vec<Unmapped>,
    /// The static release table: release name → the `ServiceDefaults` of that release.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub releases: BTreeMap<String, StaticRelease>,
}

/// One `ServiceDefaults` field → one annotation on one service kind.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Mapping {
    /// The `ServiceDefaults` JSON field, e.g. `glanceWsgi`.
    pub field: String,
    /// The service custom resource kind that carries the annotation.
    pub target: TargetKind,
    /// The annotation key, e.g. `glance.openstack.org/wsgi`.
    pub annotation: String,
    /// How the operator turns the field into the annotation value.
    pub value: ValueRule,
    /// How the service operator reads a missing annotation (`glance.openstack.org/wsgi`
    /// missing means WSGI, i.e. `true`).
    pub when_absent: bool,
    /// What the annotation switches in the service, quoted in messages.
    pub effect: String,
    /// Code references for the writer and the reader, quoted in messages.
    pub source: String,
}

/// Group, version and kind of a service custom resource.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetKind {
    /// API group, e.g. `glance.openstack.org`.
    pub group: String,
    /// API version, e.g. `v1beta1`.
    pub version: String,
    /// Kind, e.g. `Glance`.
    pub kind: String,
}

impl TargetKind {
    /// Whether a request for `group/version, kind` concerns this target.
    pub fn matches(&self, group: &str, version: &str, kind: &str) -> bool {
        self.group == group && self.version == version && self.kind == kind
    }
}

/// How a `ServiceDefaults` value becomes an annotation value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ValueRule {
    /// `"true"` when the field is exactly the string `"true"`; `"false"` otherwise, including
    /// when the field is absent (openstack-operator glance.go l.254-280 compares with `==
    /// "true"`, so `"True"` or `"1"` also give `"false"`).
    TrueOnlyWhenTrue,
}

impl ValueRule {
    /// The annotation value the operator writes for the field value `field` (None: absent).
    /// Always one of the exact strings `"true"` / `"false"`, as the operator writes them.
    pub fn apply(self, field: Option<&str>) -> &'static str {
        match self {
            ValueRule::TrueOnlyWhenTrue => {
                if field == Some("true") {
                    "true"
                } else {
                    "false"
                }
            }
        }
    }
}

/// A `ServiceDefaults` field with no annotation mapping, and why.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Unmapped {
    /// The field.
    pub field: String,
    /// Why it is not mapped (what it drives instead, or which fact is missing).
    pub reason: String,
}

/// One entry of the static release table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StaticRelease {
    /// What this release is and where its defaults come from.
    pub description: String,
    /// The release's `ServiceDefaults`, as the operator would store them in
    /// `status.availableServiceDefaults[<release>]`. Empty for releases from before the
    /// ServiceDefaults mechanism (the operator then writes `"false"` everywhere).
    #[serde(default)]
    pub service_defaults: ServiceDefaults,
}

impl ReleaseCatalog {
    /// Checks what serde cannot: kind, well-formed and unique mappings, no field both mapped
    /// and unmapped, and static releases that only use known fields.
    pub fn validate(&self) -> Result<(), CatalogError> {
        if self.kind != KIND {
            return Err(CatalogError::Kind);
        }
        let mut mapped: BTreeSet<&str> = BTreeSet::new();
        let mut targets: BTreeSet<(&str, &str, &str)> = BTreeSet::new();
        for (index, m) in self.mappings.iter().enumerate() {
            let err = |message: String| CatalogError::Mapping {
                index,
                field: m.field.clone(),
                message,
            };
            if !is_field_name(&m.field) {
                return Err(err(
                    "field must be a ServiceDefaults JSON field name such as glanceWsgi".to_owned(),
                ));
            }
            if let Err(why) = check_annotation_key(&m.annotation) {
                return Err(err(format!("annotation {:?}: {why}", m.annotation)));
            }
            if m.target.group.is_empty() || m.target.version.is_empty() || m.target.kind.is_empty()
            {
                return Err(err("target needs group, version and kind".to_owned()));
            }
            if !targets.insert((&m.target.group, &m.target.kind, &m.annotation)) {
                return Err(err(format!(
                    "a second mapping for annotation {} on {}",
                    m.annotation, m.target.kind
                )));
            }
            mapped.insert(&m.field);
        }
        let mut unmapped: BTreeSet<&str> = BTreeSet::new();
        for u in &self.unmapped {
            let err = |message: &str| CatalogError::Unmapped {
                field: u.field.clone(),
                message: message.to_owned(),
            };
            if mapped.contains(u.field.as_str()) {
                return Err(err("it is also in mappings; keep one"));
            }
            if !unmapped.insert(&u.field) {
                return Err(err("listed twice"));
            }
            if u.reason.trim().is_empty() {
                return Err(err("give the reason it is not mapped"));
            }
        }
        for (release, entry) in &self.releases {
            let err = |message: String| CatalogError::Release {
                release: release.clone(),
                message,
            };
            if release.trim().is_empty() || release.trim() != release {
                return Err(err(
                    "release names must be non-empty, without outer spaces".to_owned()
                ));
            }
            for field in entry.service_defaults.fields() {
                if !mapped.contains(field) && !unmapped.contains(field) {
                    return Err(err(format!(
                        "serviceDefaults.{field} is neither in mappings nor in unmapped (a typo?)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The mappings that concern a request for `group/version, kind`, in document order.
    pub fn mappings_for<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a Mapping> + 'a {
        self.mappings
            .iter()
            .filter(move |m| m.target.matches(group, version, kind))
    }

    /// A static release by name.
    pub fn release(&self, name: &str) -> Option<&StaticRelease> {
        self.releases.get(name)
    }
}

fn is_field_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// Checks a Kubernetes annotation key: optional DNS-subdomain prefix (≤ 253) and a `/`,
/// then a name of ≤ 63 alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn check_annotation_key(key: &str) -> Result<(), &'static str> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if p.is_empty() || p.len() > 253 || !p.split('.').all(label_ok) {
            return Err("the prefix must be a lowercase DNS subdomain");
        }
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty()
        || name.len() > 63
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || !edge_ok(name.chars().next())
        || !edge_ok(name.chars().next_back())
    {
        return Err(
            "the name must be 1-63 alphanumerics, '-', '_' or '.', alphanumeric at both ends",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_rule_mirrors_the_operator_string_compare() {
        let r = ValueRule::TrueOnlyWhenTrue;
        assert_eq!(r.apply(Some("true")), "true");
        for other in [
            None,
            Some("false"),
            Some("True"),
            Some("1"),
            Some(""),
            Some(" true"),
        ] {
            assert_eq!(r.apply(other), "false", "{other:?}");
        }
    }

    #[test]
    fn annotation_keys() {
        assert!(check_annotation_key("glance.openstack.org/wsgi").is_ok());
        assert!(check_annotation_key("location-api").is_ok());
        for bad in [
            "",
            "/x",
            "Glance.org/x",
            "a.org/",
            "a.org/-x",
            "a/b/c",
            "a.org/x y",
        ] {
            assert!(check_annotation_key(bad).is_err(), "{bad}");
        }
    }
}
