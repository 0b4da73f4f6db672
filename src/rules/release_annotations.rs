//! `release-annotations`: openstack-k8s-operators service CRs carry the annotations their
//! release's `ServiceDefaults` imply (Glance: `glance.openstack.org/wsgi`,
//! `glance.openstack.org/location-api`).
//!
//! Facts (domain-facts §4): openstack-operator `internal/openstack/glance.go` l.254-280 sets
//! each annotation to `"true"` only when the `ServiceDefaults` field is `"true"`, else
//! `"false"`, on every reconcile (CreateOrPatch). glance-operator
//! `internal/controller/glance_controller.go` l.849-868 parses them with Go
//! `strconv.ParseBool`: an unparsable value fails its reconcile; a missing `wsgi` means WSGI.
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

use jsonptr::PointerBuf;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;

use super::{MutationNote, ObjectOutput, ObjectViolation, Severity};
use crate::policy::Policy;
use crate::releases::{
    Basis, GO_BOOL_ACCEPTED, Mapping, ReleaseCatalog, ServiceDefaults, Snapshot, go_parse_bool,
};

/// Every contradiction message contains this phrase ([`classify`] relies on it).
const CONTRADICTION: &str = "contradicts the release";
/// Every unparsable-value message contains this phrase ([`classify`] relies on it).
const UNPARSABLE: &str = "cannot be parsed";
/// Longest annotation value echoed in a message.
const ECHO_MAX_CHARS: usize = 64;

/// The kinds of finding this rule reports, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// A value (or a missing value, as the service operator reads it) that differs from
    /// what the release implies.
    Contradiction,
    /// A value Go `strconv.ParseBool` rejects.
    Unparsable,
}

/// Classifies a finding message produced by this rule (None for other messages, such as the
/// several-OpenStackVersions warning).
pub fn classify(message: &str) -> Option<FindingKind> {
    if message.contains(UNPARSABLE) {
        Some(FindingKind::Unparsable)
    } else if message.contains(CONTRADICTION) {
        Some(FindingKind::Contradiction)
    } else {
        None
    }
}

/// Runs the rule on one CREATE or UPDATE.
pub fn check(
    policy: &Policy,
    catalog: &ReleaseCatalog,
    snapshot: &Snapshot,
    req: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> ObjectOutput {
    let mut out = ObjectOutput::default();
    let gvk = &req.kind;
    let mappings: Vec<&Mapping> = catalog
        .mappings_for(&gvk.group, &gvk.version, &gvk.kind)
        .collect();
    if mappings.is_empty() || object.metadata.deletion_timestamp.is_some() {
        return out;
    }
    let namespace = req
        .namespace
        .as_deref()
        .or(object.metadata.namespace.as_deref())
        .unwrap_or("");
    let static_release = policy
        .params
        .namespace_releases
        .get(namespace)
        .and_then(|name| catalog.release(name).map(|entry| (name.as_str(), entry)));
    let basis = snapshot.basis(namespace, static_release);
    let what = describe(&gvk.kind, namespace, req, object);
    if let Basis::Ambiguous { names, count } = basis {
        out.violations.push(ObjectViolation {
            severity: Severity::Warn,
            pointer: None,
            message: format!(
                "{what}: namespace {namespace} has {count} OpenStackVersions ({}, {}{}); \
                 openstack-operator supports one per namespace, so stackgate cannot tell which \
                 release applies and neither adds nor checks release annotations. Fix: delete \
                 the extra OpenStackVersion.",
                names[0],
                names[1],
                if count > 2 { ", …" } else { "" }
            ),
            fixed_by_edit: false,
        });
    }
    let enforce = policy.params.enforce_contradictions.unwrap_or(false);
    let annotations = object.metadata.annotations.as_ref();
    let old_annotations = match req.operation {
        Operation::Update => req
            .old_object
            .as_ref()
            .and_then(|o| o.metadata.annotations.as_ref()),
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
        let ratchet_note = if enforce && unchanged {
            " This request does not change the annotation, so this is a warning although the \
             policy enforces contradictions."
        } else {
            ""
        };
        match (value, &expected) {
            (Some(v), _) => match go_parse_bool(v) {
                None => {
                    let fix = match &expected {
                        Some(e) => format!(
                            "set it to \"{}\" ({}), or remove it and stackgate adds that value",
                            e.write, e.explanation
                        ),
                        None => "set it to \"true\" or \"false\", or remove it".to_owned(),
                    };
                    out.violations.push(ObjectViolation {
                        severity: Severity::Deny,
                        pointer: Some(pointer_text),
                        message: format!(
                            "{what}: annotation {key}={} {UNPARSABLE}: the service operator reads \
                             it with Go strconv.ParseBool, which accepts exactly {GO_BOOL_ACCEPTED}; \
                             any other value fails its reconcile and the service is not deployed. \
                             Fix: {fix}. Sources: {}.",
                            echo(v),
                            mapping.source.trim()
                        ),
                        fixed_by_edit: false,
                    });
                }
                Some(b) => {
                    if let Some(e) = &expected
                        && !e.accepts(b)
                    {
                        out.violations.push(ObjectViolation {
                            severity: contradiction_severity,
                            pointer: Some(pointer_text),
                            message: format!(
                                "{what}: annotation {key}={} {CONTRADICTION}: {}. {} \
                                 openstack-operator rewrites this annotation from the release's \
                                 ServiceDefaults on every reconcile of the CRs it manages, so the \
                                 two would fight and the service would be redeployed each time. \
                                 Fix: set it to \"{}\" or remove it (stackgate then adds \"{}\").{} \
                                 Sources: {}.",
                                echo(v),
                                e.explanation,
                                mapping.effect.trim(),
                                e.write,
                                e.write,
                                ratchet_note,
                                mapping.source.trim()
                            ),
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
                    out.violations.push(ObjectViolation {
                        severity: contradiction_severity,
                        pointer: Some(pointer_text),
                        message: format!(
                            "{what}: annotation {key} is missing, which the service operator \
                             reads as \"{}\"; that {CONTRADICTION}: {}. {} Fix: add {key}: \"{}\" \
                             (the stackgate mutating webhook adds it; seeing this from the \
                             validating webhook means the mutation did not run).{} Sources: {}.",
                            mapping.when_absent,
                            e.explanation,
                            mapping.effect.trim(),
                            e.write,
                            ratchet_note,
                            mapping.source.trim()
                        ),
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
fn describe(
    kind: &str,
    namespace: &str,
    req: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> String {
    let name = object
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| (!req.name.is_empty()).then(|| req.name.clone()))
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
    fn classify_tags() {
        assert_eq!(
            classify(&format!("x {UNPARSABLE} y")),
            Some(FindingKind::Unparsable)
        );
        assert_eq!(
            classify(&format!("x {CONTRADICTION} y")),
            Some(FindingKind::Contradiction)
        );
        assert_eq!(classify("namespace has 2 OpenStackVersions"), None);
    }

    #[test]
    fn echo_quotes_and_cuts() {
        assert_eq!(echo("yes"), "\"yes\"");
        let long = "x".repeat(100);
        assert!(echo(&long).ends_with('…'));
        assert_eq!(echo("a\"b"), "\"a\\\"b\"");
    }
}
