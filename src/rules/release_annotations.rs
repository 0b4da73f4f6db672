//! `release-annotations`: openstack-k8s-operators service CRs carry the annotations their
//! release's `ServiceDefaults` imply (Glance: `glance.openstack.org/wsgi`,
//! `glance.openstack.org/location-api`; Manila: `manila.openstack.org/sharev1`). Which field
//! drives which annotation is catalog data (`policies/release-catalog.yaml`), not code.
//!
//! Facts (domain-facts §4): openstack-operator `internal/openstack/glance.go` l.254-280 sets
//! each annotation to `"true"` only when the `ServiceDefaults` field is `"true"`, else
//! `"false"`, on every reconcile (CreateOrPatch). glance-operator
//! `internal/controller/glance_controller.go` l.849-868 parses them with Go
//! `strconv.ParseBool`: an unparsable value fails its reconcile; a missing `wsgi` means WSGI.
//! Manila (domain-facts §9.2): openstack-operator `internal/openstack/manila.go` writes
//! `manila.openstack.org/sharev1` by the same rule; manila-operator reads it with the same
//! parser (`IsShareV1Enabled`), and a missing value means share v1 on.
//!
//! What the rule does, for each catalog mapping of the request's kind:
//! * value present and not a Go bool → deny (with the accepted list);
//! * value present, parsable, and not what the release implies → a contradiction: warning, or
//!   denial when the policy sets `params.enforceContradictions` (only when the request sets
//!   or changes the value: an unchanged stored value is warned about, so unrelated updates
//!   such as a finalizer removal are never blocked);
//! * value missing and a release is known → add it with the exact string the operator would
//!   write, so the two never fight; if the service operator would read the missing value
//!   differently, that is also reported (fixed by the patch).
//!
//! Objects being deleted are left alone. Which release applies is decided by
//! [`crate::releases::Snapshot::basis`].

use std::collections::BTreeMap;

use jsonptr::PointerBuf;
use kube::core::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    Check, Example, Family, MutationNote, ObjectInput, Operation, ParamsInput, RuleId, RuleOutput,
    Severity, Subject, Violation,
};
use crate::releases::{
    Basis, CatalogError, GO_BOOL_ACCEPTED, Mapping, ReleaseCatalog, ServiceDefaults, Snapshot,
    go_parse_bool,
};

/// The family: reads openstack-k8s-operators service CRs.
pub static FAMILY: Family = Family {
    id: RuleId::new("release-annotations"),
    check: Check::Object(check_object),
    facts: &[],
    params: &["namespaceReleases", "enforceContradictions"],
    parse_params,
    codes: &[CODE_UNPARSABLE, CODE_CONTRADICTION, CODE_AMBIGUOUS],
    // An unparsable value is denied without any release data.
    example: || {
        Some(Example::create(
            serde_json::json!({"apiVersion": "glance.openstack.org/v1beta1",
            "kind": "Glance",
            "metadata": {"name": "glance", "namespace": "openstack",
                "annotations": {"glance.openstack.org/wsgi": "yes"}},
            "spec": {}}),
        ))
    },
    embedded: false,
    default_policy: (
        "release-annotations.yaml",
        include_str!("../../policies/release-annotations.yaml"),
    ),
};

/// A value Go `strconv.ParseBool` rejects.
pub const CODE_UNPARSABLE: &str = "unparsable";
/// A value (or a missing value, as the service operator reads it) that differs from what the
/// release implies.
pub const CODE_CONTRADICTION: &str = "contradiction";
/// Several OpenStackVersions in one namespace: which release applies is unknown.
pub const CODE_AMBIGUOUS: &str = "ambiguous-release";

/// `params` of a release-annotations policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReleaseParams {
    /// Namespace → release name from the ReleaseCatalog static table, used where no live
    /// OpenStackVersion is known for the namespace.
    #[serde(default)]
    pub namespace_releases: BTreeMap<String, String>,
    /// Deny (in enforce mode) values that contradict the release instead of warning
    /// (default false).
    #[serde(default)]
    pub enforce_contradictions: Option<bool>,
}

/// Parses the parameters and checks that every release they name is in the catalog's table.
fn parse_params(input: &ParamsInput<'_>) -> Result<super::Params, String> {
    let params = super::parse_params::<ReleaseParams>(input)?;
    if let Some(p) = params.get::<ReleaseParams>() {
        for (namespace, release) in &p.namespace_releases {
            if input.catalog.release(release).is_none() {
                return Err(CatalogError::UnknownRelease {
                    policy: input.policy.to_owned(),
                    namespace: namespace.clone(),
                    release: release.clone(),
                    known: input
                        .catalog
                        .releases
                        .keys()
                        .map(String::as_str)
                        .collect::<Vec<_>>()
                        .join(", "),
                }
                .to_string());
            }
        }
    }
    Ok(params)
}

fn check_object(input: &ObjectInput<'_>) -> RuleOutput {
    let defaults = ReleaseParams::default();
    let params = input.params.get().unwrap_or(&defaults);
    check(
        params,
        input.context.catalog,
        input.context.releases,
        input.subject,
        input.object,
    )
}

/// Every contradiction message contains this phrase (the metrics read [`CODE_CONTRADICTION`], not it).
const CONTRADICTION: &str = "contradicts the release";
/// Every unparsable-value message contains this phrase (the metrics read [`CODE_UNPARSABLE`], not it).
const UNPARSABLE: &str = "cannot be parsed";
/// Longest annotation value echoed in a message.
const ECHO_MAX_CHARS: usize = 64;

/// Runs the rule on one CREATE or UPDATE.
pub fn check(
    params: &ReleaseParams,
    catalog: &ReleaseCatalog,
    snapshot: &Snapshot,
    req: &Subject<'_>,
    object: &DynamicObject,
) -> RuleOutput {
    let mut out = RuleOutput::default();
    let gvk = &req.kind;
    let mappings: Vec<&Mapping> = catalog
        .mappings_for(&gvk.group, &gvk.version, &gvk.kind)
        .collect();
    if mappings.is_empty() || object.metadata.deletion_timestamp.is_some() {
        return out;
    }
    let namespace = req.namespace_of(object).unwrap_or("");
    let static_release = params
        .namespace_releases
        .get(namespace)
        .and_then(|name| catalog.release(name).map(|entry| (name.as_str(), entry)));
    let basis = snapshot.basis(namespace, static_release);
    let what = describe(&gvk.kind, namespace, req, object);
    if let Basis::Ambiguous { names, count } = basis {
        out.violations.push(Violation {
            severity: Severity::Warn,
            code: CODE_AMBIGUOUS,
            line: None,
            pointer: None,
            location: Some(what.clone()),
            what: format!(
                "namespace {namespace} has {count} OpenStackVersions ({}, {}{})",
                names[0],
                names[1],
                if count > 2 { ", …" } else { "" }
            ),
            fix: "delete the extra OpenStackVersion".to_owned(),
            why: "openstack-operator supports one per namespace, so stackgate cannot tell which \
                  release applies and neither adds nor checks release annotations."
                .to_owned(),
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    let enforce = params.enforce_contradictions.unwrap_or(false);
    let annotations = object.metadata.annotations.as_ref();
    let old_annotations = match req.operation {
        Operation::Update => req.old_object.and_then(|o| o.metadata.annotations.as_ref()),
        _ => None,
    };
    let is_update = matches!(req.operation, Operation::Update);
    let mut annotations_added = false;

    for mapping in mappings {
        let key = mapping.annotation.as_str();
        let pointer = PointerBuf::from_tokens(["metadata", "annotations", key]);
        let pointer_text = pointer.to_string();
        let expected = Expected::from_basis(&basis, mapping, namespace);
        let value = annotations.and_then(|a| a.get(key));
        // An UPDATE that leaves the annotation as stored only gets warnings (ratcheting).
        let unchanged = is_update && old_annotations.and_then(|a| a.get(key)) == value;
        let contradiction_severity = if enforce && !unchanged {
            Severity::Deny
        } else {
            Severity::Warn
        };
        let ratchet = enforce && unchanged;
        match (value, &expected) {
            (Some(v), _) => match go_parse_bool(v) {
                None => {
                    let (fix, expected_note) = match &expected {
                        Some(e) => (
                            format!(
                                "set it to \"{}\" or remove it (stackgate adds that value)",
                                e.write
                            ),
                            format!(" The release expects \"{}\": {}.", e.write, e.explanation),
                        ),
                        None => (
                            "set it to \"true\" or \"false\", or remove it".to_owned(),
                            String::new(),
                        ),
                    };
                    out.violations.push(Violation {
                        severity: Severity::Deny,
                        code: CODE_UNPARSABLE,
                        line: None,
                        pointer: Some(pointer_text),
                        location: Some(what.clone()),
                        what: format!("annotation {key}={} {UNPARSABLE}", echo(v)),
                        fix,
                        why: format!(
                            "The service operator reads it with Go strconv.ParseBool, which \
                             accepts exactly {GO_BOOL_ACCEPTED}; any other value fails its \
                             reconcile and the service is not deployed.{expected_note} Sources: {}.",
                            mapping.source.trim()
                        ),
                        notes: Vec::new(),
                        unseen_overlay: None,
                        fixed_by_edit: false,
                    });
                }
                Some(b) => {
                    if let Some(e) = &expected
                        && !e.accepts(b)
                    {
                        out.violations.push(Violation {
                            severity: contradiction_severity,
                            code: CODE_CONTRADICTION,
                            line: None,
                            pointer: Some(pointer_text),
                            location: Some(what.clone()),
                            what: format!("annotation {key}={} {CONTRADICTION}", echo(v)),
                            fix: format!(
                                "set it to \"{}\" or remove it (stackgate then adds \"{}\")",
                                e.write, e.write
                            ),
                            why: format!(
                                "{}. {} openstack-operator rewrites this annotation from the \
                                 release's ServiceDefaults on every reconcile of the CRs it \
                                 manages, so the two would fight and the service would be \
                                 redeployed each time. Sources: {}.",
                                upper_first(e.explanation.as_str()),
                                mapping.effect.trim(),
                                mapping.source.trim()
                            ),
                            notes: ratchet_note(ratchet),
                            unseen_overlay: None,
                            fixed_by_edit: false,
                        });
                    }
                }
            },
            (None, Some(e)) => {
                if annotations.is_none() && !annotations_added {
                    out.patch.push(add(
                        PointerBuf::from_tokens(["metadata", "annotations"]),
                        Value::Object(serde_json::Map::new()),
                    ));
                    annotations_added = true;
                }
                out.patch
                    .push(add(pointer, Value::String(e.write.to_owned())));
                out.mutations.push(MutationNote {
                    pointer: Some(pointer_text.clone()),
                    message: format!(
                        "stackgate added annotation {key}=\"{}\" to {what}: {}",
                        e.write, e.explanation
                    ),
                });
                if !e.accepts(mapping.when_absent) {
                    out.violations.push(Violation {
                        severity: contradiction_severity,
                        code: CODE_CONTRADICTION,
                        line: None,
                        pointer: Some(pointer_text),
                        location: Some(what.clone()),
                        what: format!(
                            "annotation {key} is missing, which the service operator reads as \
                             \"{}\"; that {CONTRADICTION}",
                            mapping.when_absent
                        ),
                        fix: format!("add {key}: \"{}\"", e.write),
                        why: format!(
                            "{}. {} The stackgate mutating webhook adds it; seeing this from the \
                             validating webhook means the mutation did not run. Sources: {}.",
                            upper_first(e.explanation.as_str()),
                            mapping.effect.trim(),
                            mapping.source.trim()
                        ),
                        notes: ratchet_note(ratchet),
                        unseen_overlay: None,
                        fixed_by_edit: true,
                    });
                }
            }
            (None, None) => {}
        }
    }
    out
}

/// What the release implies for one mapping.
struct Expected {
    /// The exact string the operator writes (and stackgate adds when missing).
    write: &'static str,
    /// A second accepted value during a minor update (the target release's).
    also: Option<&'static str>,
    /// Where the value comes from, for messages.
    explanation: String,
}

impl Expected {
    fn from_basis(basis: &Basis<'_>, m: &Mapping, namespace: &str) -> Option<Self> {
        let field = m.field.as_str();
        let shown = |d: &ServiceDefaults| match d.get(field) {
            Some(v) => format!("{field} = {}", echo(v)),
            None => format!("{field} unset"),
        };
        match *basis {
            Basis::Live {
                name,
                target,
                defaults,
            } => {
                let write = m.value.apply(defaults.get(field));
                Some(Self {
                    write,
                    also: None,
                    explanation: format!(
                        "OpenStackVersion {namespace}/{name} (targetVersion {target}) has \
                         status.serviceDefaults {}, for which openstack-operator writes \"{write}\"",
                        shown(defaults)
                    ),
                })
            }
            Basis::Updating {
                name,
                deployed,
                target,
                deployed_defaults,
                target_defaults,
            } => {
                let write = m.value.apply(deployed_defaults.get(field));
                let target_write = m.value.apply(target_defaults.get(field));
                Some(Self {
                    write,
                    also: (target_write != write).then_some(target_write),
                    explanation: format!(
                        "OpenStackVersion {namespace}/{name} is updating from {deployed} to \
                         {target}: the deployed release (status.availableServiceDefaults[{deployed}] \
                         {}) implies \"{write}\" and the target (status.serviceDefaults {}) \
                         implies \"{target_write}\"; until openstack-operator's control-plane \
                         update stage rewrites the annotation, either value is accepted",
                        shown(deployed_defaults),
                        shown(target_defaults)
                    ),
                })
            }
            Basis::Static { release, defaults } => {
                let write = m.value.apply(defaults.get(field));
                Some(Self {
                    write,
                    also: None,
                    explanation: format!(
                        "release {release} (static release table, named for namespace \
                         {namespace} by params.namespaceReleases; no OpenStackVersion is known \
                         there) has serviceDefaults {}, for which openstack-operator writes \
                         \"{write}\"",
                        shown(defaults)
                    ),
                })
            }
            Basis::Pending { .. } | Basis::Ambiguous { .. } | Basis::Unknown => None,
        }
    }

    fn accepts(&self, b: bool) -> bool {
        let word = if b { "true" } else { "false" };
        self.write == word || self.also == Some(word)
    }
}

fn add(path: PointerBuf, value: Value) -> json_patch::PatchOperation {
    json_patch::PatchOperation::Add(json_patch::AddOperation { path, value })
}

/// `Kind namespace/name` (the generateName prefix with `*` when the name is not set yet).
fn describe(kind: &str, namespace: &str, req: &Subject<'_>, object: &DynamicObject) -> String {
    let name = object
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| (!req.name.is_empty()).then(|| req.name.to_string()))
        .or_else(|| {
            object
                .metadata
                .generate_name
                .as_ref()
                .map(|g| format!("{g}*"))
        })
        .unwrap_or_else(|| "<unnamed>".to_owned());
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

/// `s` with its first letter in upper case (a clause made a sentence).
fn upper_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The note of a contradiction the request does not change (ratcheting).
fn ratchet_note(ratchet: bool) -> Vec<String> {
    if ratchet {
        vec![
            "This request does not change the annotation, so this is a warning although the \
             policy enforces contradictions."
                .to_owned(),
        ]
    } else {
        Vec::new()
    }
}

/// A value quoted for a message, cut at [`ECHO_MAX_CHARS`] characters.
fn echo(v: &str) -> String {
    if v.chars().count() <= ECHO_MAX_CHARS {
        return format!("{v:?}");
    }
    let cut: String = v.chars().take(ECHO_MAX_CHARS).collect();
    format!("{cut:?}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_quotes_and_cuts() {
        assert_eq!(echo("yes"), "\"yes\"");
        let long = "x".repeat(100);
        assert!(echo(&long).ends_with('…'));
        assert_eq!(echo("a\"b"), "\"a\\\"b\"");
    }
}
