//! Static admission manifests (KEP-5793, `ManifestBasedAdmissionControlConfig`, alpha in
//! Kubernetes 1.36): the generated policies as files the apiserver reads at start-up from the
//! `staticManifestsDir` of each admission plugin, enforced before etcd holds any object and
//! before any webhook is up, plus a policy that keeps stackgate's own webhook configurations
//! and admission policies from being deleted or weakened except by a break-glass group.
//!
//! The apiserver refuses to start on a malformed directory, so [`StaticManifests::validate`]
//! checks what its loader checks (`k8s.io/apiserver/pkg/admission/plugin/manifest`,
//! `plugin/policy/manifest/loader`) before anything is written: only
//! `admissionregistration.k8s.io/v1`, names ending in `.static.k8s.io` and unique per
//! directory, no `paramKind` or `paramRef`, every binding naming a policy of its own
//! directory, one plugin's kinds per directory.
//!
//! Pure: the CLI writes the files.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::served::ApiChoice;
use super::{AdmissionPolicies, AdmissionPoliciesError, KubeVersion, V1, cel_str};

/// The suffix the apiserver reserves for static manifests (`manifest.StaticConfigSuffix`).
pub const STATIC_SUFFIX: &str = ".static.k8s.io";

/// The first Kubernetes version with static admission manifests (alpha, behind the
/// `ManifestBasedAdmissionControlConfig` feature gate).
const FIRST_MINOR: u32 = 36;

/// The group allowed to delete or change stackgate's admission objects when none is given.
pub const DEFAULT_BREAK_GLASS_GROUP: &str = "stackgate:break-glass";

/// Whether Kubernetes `version` reads static admission manifests (1.36 or later).
pub fn supported(version: KubeVersion) -> Result<(), AdmissionPoliciesError> {
    if version.at_least(FIRST_MINOR) {
        Ok(())
    } else {
        Err(AdmissionPoliciesError::StaticUnsupported(version))
    }
}

/// The directory of one admission plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginDir {
    /// The admission plugin (`ValidatingAdmissionPolicy`, `MutatingAdmissionPolicy`).
    pub plugin: &'static str,
    /// Its configuration kind in the `AdmissionConfiguration`.
    pub configuration_kind: &'static str,
    /// The sub-directory of the output directory.
    pub subdir: &'static str,
    /// The kinds it may hold.
    kinds: [&'static str; 2],
    /// The objects, in file order.
    pub objects: Vec<Value>,
}

/// The static manifests: one directory per plugin, and the `AdmissionConfiguration`.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticManifests {
    /// The validating and (when generated) mutating directories.
    pub dirs: Vec<PluginDir>,
}

/// The file each directory's objects are written to.
pub const MANIFEST_FILE: &str = "stackgate.yaml";

/// The file the `AdmissionConfiguration` is written to.
pub const ADMISSION_CONFIGURATION_FILE: &str = "admission-configuration.yaml";

impl StaticManifests {
    /// The static manifests of `generated` for `version` (1.36 or later), with the
    /// self-protection policy letting `break_glass_group` through; only the families `choice`
    /// names (from [`super::served::choose_static`]), except that the self-protection policy
    /// is always written.
    pub fn new(
        generated: &AdmissionPolicies,
        version: KubeVersion,
        break_glass_group: &str,
        choice: ApiChoice,
    ) -> Result<Self, AdmissionPoliciesError> {
        supported(version)?;
        if break_glass_group.trim().is_empty() {
            return Err(AdmissionPoliciesError::BadStaticManifest(
                "the break-glass group is empty".to_owned(),
            ));
        }
        let renamed = |objects: &[Value]| -> Vec<Value> {
            objects
                .iter()
                .map(|o| {
                    let mut o = o.clone();
                    o["apiVersion"] = json!(V1);
                    let name = o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    // Names are unique across kinds in a directory: a binding, named as its
                    // policy in the API, gets `-binding`.
                    let name = match o["spec"]["policyName"].as_str().map(str::to_owned) {
                        Some(policy) => {
                            o["spec"]["policyName"] = json!(format!("{policy}{STATIC_SUFFIX}"));
                            format!("{name}-binding{STATIC_SUFFIX}")
                        }
                        None => format!("{name}{STATIC_SUFFIX}"),
                    };
                    o["metadata"]["name"] = json!(name);
                    o
                })
                .collect()
        };
        let none = AdmissionPolicies::default();
        let validating_source = if choice.validating.is_some() {
            generated
        } else {
            &none
        };
        let mut validating = renamed(&validating_source.validating);
        validating.push(self_protection_policy(break_glass_group));
        validating.extend(renamed(&validating_source.validating_bindings));
        validating.push(self_protection_binding());
        let mut dirs = vec![PluginDir {
            plugin: "ValidatingAdmissionPolicy",
            configuration_kind: "ValidatingAdmissionPolicyConfiguration",
            subdir: "validating",
            kinds: [
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
            ],
            objects: validating,
        }];
        if choice.mutating.is_some() && !generated.mutating.is_empty() {
            let mut mutating = renamed(&generated.mutating);
            mutating.extend(renamed(&generated.mutating_bindings));
            dirs.push(PluginDir {
                plugin: "MutatingAdmissionPolicy",
                configuration_kind: "MutatingAdmissionPolicyConfiguration",
                subdir: "mutating",
                kinds: ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"],
                objects: mutating,
            });
        }
        let manifests = StaticManifests { dirs };
        manifests.validate()?;
        Ok(manifests)
    }

    /// Checks what the apiserver's manifest loader checks, so that no directory it would
    /// refuse (and then refuse to start) is ever written.
    pub fn validate(&self) -> Result<(), AdmissionPoliciesError> {
        let bad = |what: String| Err(AdmissionPoliciesError::BadStaticManifest(what));
        for dir in &self.dirs {
            let mut names = BTreeSet::new();
            let mut policies = BTreeSet::new();
            for o in &dir.objects {
                let kind = o["kind"].as_str().unwrap_or_default();
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                if o["apiVersion"] != V1 {
                    return bad(format!("{kind} {name:?}: only {V1} is read"));
                }
                if !dir.kinds.contains(&kind) {
                    return bad(format!("{kind} {name:?} in the {} directory", dir.plugin));
                }
                if !name.ends_with(STATIC_SUFFIX) || !is_dns_subdomain(name) {
                    return bad(format!(
                        "{kind} {name:?}: a name must be a DNS subdomain ending in {STATIC_SUFFIX}"
                    ));
                }
                if !names.insert(name) {
                    return bad(format!("{kind} {name:?} twice"));
                }
                if o["spec"].get("paramKind").is_some() || o["spec"].get("paramRef").is_some() {
                    return bad(format!("{kind} {name:?}: no paramKind or paramRef"));
                }
                if kind == dir.kinds[0] {
                    policies.insert(name);
                }
            }
            for o in &dir.objects {
                if o["kind"] != dir.kinds[1] {
                    continue;
                }
                let policy = o["spec"]["policyName"].as_str().unwrap_or_default();
                if !policies.contains(policy) {
                    return bad(format!(
                        "binding {} names policy {policy:?}, not in its directory",
                        o["metadata"]["name"]
                    ));
                }
            }
        }
        Ok(())
    }

    /// The YAML of one directory's manifest file. The header comment sits inside the first
    /// document: the apiserver's loader reads a comment-only document before the first `---`
    /// as an object without a kind and refuses to start.
    pub fn manifest_yaml(dir: &PluginDir) -> String {
        let mut out = String::new();
        for (i, o) in dir.objects.iter().enumerate() {
            out.push_str("---\n");
            if i == 0 {
                out.push_str(&format!(
                    "# stackgate static admission manifests for the {} plugin (generated by \
                     `stackgate policies --output static-manifests`)\n",
                    dir.plugin
                ));
            }
            out.push_str(&serde_json::to_string_pretty(o).unwrap_or_default());
            out.push('\n');
        }
        out
    }

    /// The `AdmissionConfiguration` naming each directory under `root` (an absolute path, as
    /// the apiserver requires), for `--admission-control-config-file`.
    pub fn admission_configuration(&self, root: &str) -> Result<String, AdmissionPoliciesError> {
        if !root.starts_with('/') {
            return Err(AdmissionPoliciesError::BadStaticManifest(format!(
                "{root:?}: staticManifestsDir must be an absolute path"
            )));
        }
        let root = root.trim_end_matches('/');
        let plugins: Vec<Value> = self
            .dirs
            .iter()
            .map(|d| {
                json!({
                    "name": d.plugin,
                    "configuration": {
                        "apiVersion": "apiserver.config.k8s.io/v1",
                        "kind": d.configuration_kind,
                        "staticManifestsDir": format!("{root}/{}", d.subdir),
                    },
                })
            })
            .collect();
        let config = json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": plugins,
        });
        Ok(format!(
            "# For kube-apiserver --admission-control-config-file, with \
             --feature-gates=ManifestBasedAdmissionControlConfig=true (Kubernetes 1.36 alpha). \
             Merge these plugins into an existing AdmissionConfiguration.\n{}\n",
            serde_json::to_string_pretty(&config).unwrap_or_default()
        ))
    }
}

/// A DNS subdomain (RFC 1123): what the apiserver accepts as these objects' names.
fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

const PROTECTION_NAME: &str = "stackgate-self-protection.static.k8s.io";

/// Whether `o` is stackgate's: the chart labels its objects `app.kubernetes.io/part-of:
/// stackgate`, the generated policies `app.kubernetes.io/managed-by: stackgate`.
fn ours(o: &str) -> String {
    let label = |key: &str| {
        format!(
            "(has({o}.metadata.labels) && {k} in {o}.metadata.labels && {o}.metadata.labels[{k}] == 'stackgate')",
            k = cel_str(key)
        )
    };
    format!(
        "{} || {}",
        label("app.kubernetes.io/part-of"),
        label("app.kubernetes.io/managed-by")
    )
}

/// Whether field `f` is the same in `object` and `oldObject` (absent in both, or equal).
fn same(f: &str) -> String {
    format!(
        "(has(object.{f}) == has(oldObject.{f}) && (!has(object.{f}) || object.{f} == oldObject.{f}))"
    )
}

/// The self-protection policy: on stackgate's webhook configurations and admission policies
/// (API-registered ones; the static ones cannot be changed through the API), refuse DELETE,
/// and an UPDATE that changes what they check (`spec`; a webhook's fields other than
/// `clientConfig.caBundle`, which certificate rotation rewrites) or drops the label that marks
/// them, unless the requester is in `break_glass_group`.
fn self_protection_policy(break_glass_group: &str) -> Value {
    let webhook_fields = [
        "name",
        "rules",
        "failurePolicy",
        "matchPolicy",
        "namespaceSelector",
        "objectSelector",
        "sideEffects",
        "timeoutSeconds",
        "admissionReviewVersions",
        "matchConditions",
        "reinvocationPolicy",
        "clientConfig.url",
        "clientConfig.service",
    ];
    let webhook_same = |w: &str, o: &str| {
        webhook_fields
            .iter()
            .map(|f| {
                format!("(has({w}.{f}) == has({o}.{f}) && (!has({w}.{f}) || {w}.{f} == {o}.{f}))")
            })
            .collect::<Vec<_>>()
            .join(" && ")
    };
    let webhooks_same = format!(
        "(has(object.webhooks) == has(oldObject.webhooks) && (!has(object.webhooks) || \
         (size(object.webhooks) == size(oldObject.webhooks) && \
         object.webhooks.all(w, oldObject.webhooks.exists(o, {}
         )))))",
        webhook_same("w", "o")
    );
    json!({
        "apiVersion": V1,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": PROTECTION_NAME,
            "labels": {"app.kubernetes.io/managed-by": "stackgate"},
        },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": ["admissionregistration.k8s.io"],
                "apiVersions": ["*"],
                "operations": ["UPDATE", "DELETE"],
                "resources": [
                    "validatingwebhookconfigurations",
                    "mutatingwebhookconfigurations",
                    "validatingadmissionpolicies",
                    "validatingadmissionpolicybindings",
                    "mutatingadmissionpolicies",
                    "mutatingadmissionpolicybindings",
                ],
            }]},
            "matchConditions": [{
                "name": "stackgate-object",
                "expression": format!("oldObject != null && ({})", ours("oldObject")),
            }],
            "variables": [{
                "name": "breakGlass",
                "expression": format!(
                    "has(request.userInfo.groups) && {} in request.userInfo.groups",
                    cel_str(break_glass_group)
                ),
            }],
            "validations": [{
                "expression": format!(
                    "variables.breakGlass || (request.operation == 'UPDATE' && ({ours}) && {spec} && {webhooks_same})",
                    ours = ours("object"),
                    spec = same("spec"),
                ),
                "message": format!(
                    "stackgate's webhook configurations and admission policies may not be \
                     deleted, unlabelled or changed in what they check, except by the \
                     break-glass group {break_glass_group} (static policy {PROTECTION_NAME})"
                ),
                "reason": "Forbidden",
            }],
        },
    })
}

fn self_protection_binding() -> Value {
    json!({
        "apiVersion": V1,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {
            "name": "stackgate-self-protection-binding.static.k8s.io",
            "labels": {"app.kubernetes.io/managed-by": "stackgate"},
        },
        "spec": {"policyName": PROTECTION_NAME, "validationActions": ["Deny"]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySet;

    const BOTH: ApiChoice = ApiChoice {
        validating: Some(V1),
        mutating: Some(V1),
    };

    fn manifests() -> StaticManifests {
        let generated = super::super::generate(&PolicySet::embedded().unwrap());
        StaticManifests::new(&generated, "1.36".parse().unwrap(), "ops:break-glass", BOTH).unwrap()
    }

    #[test]
    fn names_end_in_the_suffix_and_bindings_follow() {
        let m = manifests();
        assert_eq!(m.dirs.len(), 2);
        for dir in &m.dirs {
            for o in &dir.objects {
                assert!(
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap()
                        .ends_with(STATIC_SUFFIX)
                );
                assert_eq!(o["apiVersion"], V1);
            }
        }
        let protection = &m.dirs[0].objects;
        assert!(
            protection
                .iter()
                .any(|o| o["metadata"]["name"] == PROTECTION_NAME
                    && o["kind"] == "ValidatingAdmissionPolicy"
                    && o.to_string().contains("ops:break-glass"))
        );
    }

    #[test]
    fn versions_before_1_36_and_an_empty_group_are_refused() {
        let generated = super::super::generate(&PolicySet::embedded().unwrap());
        assert!(matches!(
            StaticManifests::new(&generated, "1.35".parse().unwrap(), "g", BOTH),
            Err(AdmissionPoliciesError::StaticUnsupported(_))
        ));
        assert!(StaticManifests::new(&generated, "1.36".parse().unwrap(), " ", BOTH).is_err());
    }

    #[test]
    fn validation_refuses_what_the_apiserver_loader_refuses() {
        let base = manifests();
        type Breaks = Box<dyn Fn(&mut StaticManifests)>;
        let broken: Vec<(&str, Breaks)> = vec![
            (
                "v1beta1",
                Box::new(|m| {
                    m.dirs[0].objects[0]["apiVersion"] =
                        json!("admissionregistration.k8s.io/v1beta1")
                }),
            ),
            (
                "suffix",
                Box::new(|m| m.dirs[0].objects[0]["metadata"]["name"] = json!("x")),
            ),
            (
                "upper case",
                Box::new(|m| m.dirs[0].objects[0]["metadata"]["name"] = json!("X.static.k8s.io")),
            ),
            (
                "duplicate",
                Box::new(|m| {
                    let first = m.dirs[0].objects[0].clone();
                    m.dirs[0].objects.push(first);
                }),
            ),
            (
                "paramKind",
                Box::new(|m| {
                    m.dirs[0].objects[0]["spec"]["paramKind"] = json!({"kind": "ConfigMap"})
                }),
            ),
            (
                "dangling binding",
                Box::new(|m| {
                    let binding = m.dirs[0]
                        .objects
                        .iter_mut()
                        .find(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
                        .unwrap();
                    binding["spec"]["policyName"] = json!("gone.static.k8s.io");
                }),
            ),
            (
                "wrong directory",
                Box::new(|m| {
                    let mutating = m.dirs[1].objects[0].clone();
                    m.dirs[0].objects.push(mutating);
                }),
            ),
        ];
        assert!(base.validate().is_ok());
        for (what, breaks) in broken {
            let mut m = base.clone();
            breaks(&mut m);
            assert!(
                matches!(
                    m.validate(),
                    Err(AdmissionPoliciesError::BadStaticManifest(_))
                ),
                "{what}"
            );
        }
    }

    #[test]
    fn the_admission_configuration_names_absolute_directories() {
        let m = manifests();
        let text = m
            .admission_configuration("/etc/kubernetes/stackgate/")
            .unwrap();
        assert!(text.contains("\"staticManifestsDir\": \"/etc/kubernetes/stackgate/validating\""));
        assert!(text.contains("\"staticManifestsDir\": \"/etc/kubernetes/stackgate/mutating\""));
        assert!(text.contains("MutatingAdmissionPolicyConfiguration"));
        assert!(m.admission_configuration("relative/dir").is_err());
    }
}
