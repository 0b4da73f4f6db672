//! What a face needs to show an object, asked of the engine in one call
//! ([`Engine::describe`]) rather than of the carriers: how the object is named, whether its
//! diffs are masked as a Secret's, the values label it carries and where it holds the CCM
//! chart's values; and the cloud configs a masked diff compares ([`Engine::configs`]).
//!
//! Why a call of its own and not fields of [`super::Verdict`]: the webhook builds a verdict
//! per review and shows none of this (its findings name the object through
//! [`super::ObjectRef`]), while the values fields cost a walk of the registry's places (a
//! YAML parse for a values string) and a ConfigMap's secrets a scan of its payloads. A face
//! asks when it shows an object, and also for objects it does not evaluate (`check`'s
//! HelmChartConfig merged into its HelmChart, an object whose evaluation ran out of memory).

use kube::core::GroupVersionKind;

use super::{Engine, Subject};
use crate::sites;

/// Where a cloud config's line is written in the object (a values path, or a line of a
/// string): the `trace` of [`super::Anchor::CloudConfig`] and [`super::Anchor::Embedded`].
pub use crate::sites::Anchor as Trace;
pub use crate::sites::FoundConfig;
pub use crate::sites::delivery::ValuesField;

/// What a face shows about an object besides its findings ([`Engine::describe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubjectView {
    /// How reports name the object: `Kind namespace/name`, `Kind name` without a namespace,
    /// `values file NAME` for a plain values file.
    pub name: String,
    /// Whether the object keeps cloud configs as secrets: a Secret, or a ConfigMap whose
    /// ClusterResourceSet payload embeds a Secret site. A face shows none of its content
    /// (diffs are masked as a Secret's).
    pub holds_secrets: bool,
    /// The label that marks the object as holding the CCM chart's values, when it carries it.
    pub labelled_values: Option<LabelledValues>,
    /// The fields of the object that hold the CCM chart's values, as the registry places
    /// them: what tells values keys from the object's own fields.
    pub values_fields: Vec<ValuesField>,
}

/// A values label on an object (`valuesLabel` of the sites document) and the data key it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelledValues {
    /// The label's key (`stackgate.dev/ccm-values`): removing it makes the object plain data.
    pub label: String,
    /// The data key that holds the values (the label's value).
    pub key: String,
}

impl Engine {
    /// What a face shows about `subject`'s object (the written one, else the stored one)
    /// besides its findings, read with this engine's sites document. Without an object: the
    /// subject's reference as its name, and nothing held.
    pub fn describe(&self, subject: &Subject<'_>) -> SubjectView {
        let kind = subject.kind;
        let Some(object) = subject.object.or(subject.old_object) else {
            return SubjectView {
                name: subject.reference().to_string(),
                holds_secrets: false,
                labelled_values: None,
                values_fields: Vec::new(),
            };
        };
        let document = &self.policies().sites;
        let labelled_values = document.values_label.as_deref().and_then(|label| {
            sites::labelled_values_key(object, document).map(|key| LabelledValues {
                label: label.to_owned(),
                key: key.to_owned(),
            })
        });
        SubjectView {
            name: sites::object_name(kind, object),
            holds_secrets: is_core(kind, "Secret") || sites::embeds_secret(kind, object, document),
            labelled_values,
            values_fields: sites::delivery::values_fields(kind, object, document),
        }
    }

    /// The cloud configs of `subject`'s written object as this engine's sites document places
    /// them (without the keys a CCM container's `--cloud-config` names, which only the facts
    /// of a run add): what a masked diff of a fix compares before and after the patch. Empty
    /// without a written object.
    pub fn configs(&self, subject: &Subject<'_>) -> Vec<FoundConfig> {
        subject.object.map_or_else(Vec::new, |object| {
            sites::find(subject.kind, object, &self.policies().sites)
        })
    }
}

/// Whether `kind` is the core `v1` kind `name`.
fn is_core(kind: &GroupVersionKind, name: &str) -> bool {
    kind.group.is_empty() && kind.version == "v1" && kind.kind == name
}

#[cfg(test)]
mod tests {
    use kube::core::DynamicObject;
    use serde_json::json;

    use super::*;
    use crate::policy::PolicySet;
    use crate::yaml::Seg;

    /// The kind and the object of `json`.
    fn object(json: serde_json::Value) -> (GroupVersionKind, DynamicObject) {
        let api = json["apiVersion"].as_str().expect("apiVersion").to_owned();
        let (group, version) = api.split_once('/').unwrap_or(("", api.as_str()));
        let kind = GroupVersionKind::gvk(group, version, json["kind"].as_str().expect("kind"));
        (kind, serde_json::from_value(json).expect("an object"))
    }

    fn engine() -> Engine {
        Engine::new(PolicySet::embedded().expect("the embedded policies load"))
    }

    fn describe(json: serde_json::Value) -> SubjectView {
        let (kind, object) = object(json);
        engine().describe(&Subject::create(&kind, &object))
    }

    fn configs(json: serde_json::Value) -> Vec<String> {
        let (kind, object) = object(json);
        engine()
            .configs(&Subject::create(&kind, &object))
            .iter()
            .map(FoundConfig::pointer)
            .collect()
    }

    const CLOUD_CONF: &str = "[Global]\nauth-url = https://keystone.example:5000/v3\n";

    fn config_map(data: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cloud-config", "namespace": "kube-system"},
               "data": data})
    }

    #[test]
    fn a_config_map_is_named_by_kind_namespace_and_name_and_holds_no_secret() {
        let view = describe(config_map(json!({"cloud.conf": CLOUD_CONF})));
        assert_eq!(
            view,
            SubjectView {
                name: "ConfigMap kube-system/cloud-config".to_owned(),
                holds_secrets: false,
                labelled_values: None,
                values_fields: Vec::new(),
            }
        );
    }

    #[test]
    fn a_secret_holds_secrets_and_its_cloud_config_is_found() {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloud-config", "namespace": "kube-system"},
            "stringData": {"cloud.conf": CLOUD_CONF}});
        let view = describe(secret.clone());
        assert_eq!(view.name, "Secret kube-system/cloud-config");
        assert!(view.holds_secrets);
        assert_eq!(view.labelled_values, None);
        assert_eq!(configs(secret), ["/stringData/cloud.conf"]);
        // A Secret of another group is no core Secret.
        let other = json!({"apiVersion": "example.org/v1", "kind": "Secret",
            "metadata": {"name": "s"}});
        let view = describe(other);
        assert_eq!(view.name, "Secret s");
        assert!(!view.holds_secrets);
    }

    #[test]
    fn a_payload_config_map_embedding_a_secret_holds_secrets() {
        let embedded = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                        namespace: kube-system\nstringData:\n  cloud.conf: |\n    [Global]\n    \
                        auth-url = https://keystone.example:5000/v3\n";
        let payload = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "crs-cloud-config", "namespace": "default"},
            "data": {"cloud-config.yaml": embedded}});
        let view = describe(payload.clone());
        assert_eq!(view.name, "ConfigMap default/crs-cloud-config");
        assert!(view.holds_secrets);
        assert_eq!(configs(payload), ["/data/cloud-config.yaml"]);
        // The same manifest embedding a ConfigMap keeps no secret.
        let plain = embedded
            .replace("kind: Secret", "kind: ConfigMap")
            .replace("stringData:\n  cloud.conf", "data:\n  cloud.conf");
        let view = describe(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "crs-cloud-config", "namespace": "default"},
            "data": {"cloud-config.yaml": plain}}));
        assert!(!view.holds_secrets);
    }

    #[test]
    fn a_flux_helm_release_holds_its_values_under_spec_values() {
        let release = json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager"}},
                     "values": {"cloudConfig": {"global": {"auth-url": "https://k:5000/v3"}}}}});
        let view = describe(release.clone());
        assert_eq!(view.name, "HelmRelease kube-system/occm");
        assert!(!view.holds_secrets);
        assert_eq!(view.labelled_values, None);
        assert_eq!(
            view.values_fields,
            [ValuesField {
                path: vec![Seg::key("spec"), Seg::key("values")],
                yaml_string: false,
            }]
        );
        assert_eq!(configs(release), ["/spec/values/cloudConfig"]);
    }

    #[test]
    fn a_helm_chart_holds_its_values_in_a_string() {
        let chart = json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": "openstack-cloud-controller-manager",
                     "valuesContent": "cloudConfig:\n  global:\n    region: R\n"}});
        let view = describe(chart);
        assert_eq!(
            view.values_fields,
            [ValuesField {
                path: vec![Seg::key("spec"), Seg::key("valuesContent")],
                yaml_string: true,
            }]
        );
    }

    #[test]
    fn a_labelled_values_object_names_its_label_and_key() {
        let values = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "occm-values", "namespace": "kube-system",
                         "labels": {"stackgate.dev/ccm-values": "values.yaml", "app": "occm"}},
            "data": {"values.yaml": "cloudConfig:\n  global:\n    region: R\n"}});
        let view = describe(values.clone());
        assert_eq!(view.name, "ConfigMap kube-system/occm-values");
        assert!(!view.holds_secrets);
        assert_eq!(
            view.labelled_values,
            Some(LabelledValues {
                label: "stackgate.dev/ccm-values".to_owned(),
                key: "values.yaml".to_owned(),
            })
        );
        assert_eq!(view.values_fields, Vec::new());
        assert_eq!(configs(values), ["/data/values.yaml"]);
    }

    #[test]
    fn a_values_file_is_named_as_one() {
        let view = describe(json!({"apiVersion": sites::helm::VALUES_FILE_API_VERSION,
            "kind": sites::helm::VALUES_FILE_KIND, "metadata": {"name": "values.yaml"},
            "chart": "openstack-cloud-controller-manager", "values": {}}));
        assert_eq!(view.name, "values file values.yaml");
    }

    #[test]
    fn without_an_object_the_reference_names_it() {
        let kind = GroupVersionKind::gvk("", "v1", "Secret");
        let stored = DynamicObject::new("gone", &api(&kind));
        let mut subject = Subject::create(&kind, &stored);
        subject.object = None;
        subject.namespace = Some(crate::short_text::ShortText::name("kube-system"));
        let view = engine().describe(&subject);
        assert_eq!(view.name, "Secret kube-system/gone");
        assert!(!view.holds_secrets);
        assert!(engine().configs(&subject).is_empty());
    }

    fn api(kind: &GroupVersionKind) -> kube::core::ApiResource {
        kube::core::ApiResource::from_gvk(kind)
    }
}
