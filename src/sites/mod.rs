//! Sites: the places in an object that hold a CCM cloud config, and how to write an edit
//! back as a JSON Patch. Rules never see carriers; they see the INI text and a
//! human-readable location.
//!
//! Which objects are sites is policy data ([`SitesDocument`], loaded with the policies), not code.
//!
//! Carriers: ConfigMap `data`, Secret `data` (base64) / `stringData`, and the values of the
//! `openstack-cloud-controller-manager` Helm chart inside Flux HelmReleases, Argo CD
//! Applications and RKE2/k3s HelmCharts ([`helm`]): structured `cloudConfig` values are
//! rendered to the INI the chart would produce ([`render`]) so the rules run unchanged, and
//! edits go back as JSON Patch `add`s on the values or as a minimal edit of a values string
//! ([`yamledit`]).

pub mod helm;
pub mod render;

use base64::Engine as _;
use json_patch::{PatchOperation, ReplaceOperation};
use jsonptr::PointerBuf;
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::cloudconf::Document;
use crate::cloudconf::IniEdit;
use crate::yaml;
use serde::{Deserialize, Serialize};

pub use crate::yaml::Seg;
pub use helm::{helm_controller_extra_args, helm_controller_extra_args_all};

/// Where cloud configs live: a document of kind `CloudConfigSites`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SitesDocument {
    /// Always `stackgate.dev/v1alpha1`.
    pub api_version: String,
    /// Always `CloudConfigSites`.
    pub kind: String,
    /// Named ConfigMaps and Secrets that hold a cloud config.
    pub sites: Vec<SiteSpec>,
    /// Any ConfigMap or Secret carrying this label is a site; the label value names the data key.
    pub label: Option<String>,
}

/// The carrier kinds a [`SiteSpec`] can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
pub enum SiteKind {
    /// core/v1 ConfigMap, `data[key]`.
    ConfigMap,
    /// core/v1 Secret, `data[key]` (base64) or `stringData[key]`.
    Secret,
}

impl SiteKind {
    /// The Kubernetes kind name.
    pub fn as_str(self) -> &'static str {
        match self {
            SiteKind::ConfigMap => "ConfigMap",
            SiteKind::Secret => "Secret",
        }
    }
}

/// One named place holding a cloud config.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SiteSpec {
    /// ConfigMap or Secret.
    pub kind: SiteKind,
    /// Namespace of the object.
    pub namespace: String,
    /// Name of the object.
    pub name: String,
    /// Data key holding the INI text.
    pub key: String,
    /// Whether stackgate may edit it (false for copies an operator regenerates).
    #[serde(default = "default_true")]
    pub mutate: bool,
    /// Why it is validate-only, shown in messages.
    #[serde(default)]
    pub note: Option<String>,
}

fn default_true() -> bool {
    true
}

/// How the INI text is stored in the object.
#[derive(Debug, Clone, PartialEq)]
enum Carrier {
    /// ConfigMap `data[key]`, plain text.
    ConfigMapData,
    /// Secret `data[key]`, base64.
    SecretData,
    /// Secret `stringData[key]`, plain text (only in manifests; the apiserver merges it into
    /// `data` before admission).
    SecretStringData,
    /// Helm chart values.
    Helm(Box<helm::HelmSite>),
}

/// What kind of object holds a site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Secret.
    Secret,
    /// Values of the CCM Helm chart (HelmRelease, Application, HelmChart, values file).
    HelmValues,
}

/// Where a line of a site's cloud config is written in the object, for tools that map
/// findings back to source files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// A node of the object: a structured value, or the field when nothing finer is known.
    Node(Vec<Seg>),
    /// Line `line` (1-based) of the string at `path`.
    TextLine {
        /// Path of the string field.
        path: Vec<Seg>,
        /// 1-based line within the string.
        line: usize,
    },
}

/// Why the text of a site could not be read. Messages never contain the content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiteError {
    /// `data[key]` of a Secret is not valid base64.
    #[error("{location} is not valid base64")]
    Base64 {
        /// Where.
        location: String,
    },
    /// The decoded bytes are not UTF-8 (gcfg rejects such a file, so the CCM would not start).
    #[error("{location} is not valid UTF-8 text (the CCM rejects non-UTF-8 cloud configs)")]
    Utf8 {
        /// Where.
        location: String,
    },
    /// The value is not a string.
    #[error("{location} is not a string")]
    NotAString {
        /// Where.
        location: String,
    },
    /// A values string is not valid YAML (Helm would refuse it too).
    #[error("{}", yaml_message(.location, .error))]
    Yaml {
        /// Where.
        location: String,
        /// Position and kind of the problem.
        error: yaml::YamlError,
    },
    /// The text is larger than stackgate reads (see
    /// [`helm::MAX_VALUES_TEXT_BYTES`]); nothing in it was parsed.
    #[error("{location} is {size} bytes, over stackgate's limit of {limit} bytes for it")]
    TooLarge {
        /// Where.
        location: String,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// More values carriers in one object than stackgate reads (see
    /// [`helm::MAX_CARRIERS_PER_OBJECT`]); none was parsed.
    #[error(
        "{location} holds {count} places for the CCM chart's values, over stackgate's limit of \
         {limit}"
    )]
    TooManyCarriers {
        /// Where.
        location: String,
        /// How many.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The chart cannot render the structured cloud config.
    #[error("{location}: {error}")]
    Render {
        /// Where.
        location: String,
        /// Which section.
        error: render::RenderError,
    },
}

/// A values string Helm cannot read, or one over stackgate's own YAML caps (which Helm might
/// read: the message must not say otherwise).
fn yaml_message(location: &str, error: &yaml::YamlError) -> String {
    match error.limit {
        Some(_) => format!("{location} is over stackgate's YAML limits ({error})"),
        None => format!("{location} is not valid YAML ({error}), so Helm cannot read these values"),
    }
}

/// A cloud config found in an object.
#[derive(Debug, Clone)]
pub struct FoundConfig {
    /// `ConfigMap openshift-config/cloud-provider-config`.
    pub object: String,
    /// `data["config"]`.
    pub location: String,
    /// The INI text, or why it cannot be read.
    pub text: Result<String, SiteError>,
    /// Whether stackgate may edit this site.
    pub mutable: bool,
    /// Why it is validate-only, when it is.
    pub note: Option<String>,
    /// Whether the cloud config is kept in a Secret: a Secret object, or Helm values (the
    /// chart renders them into Secret `cloud-config`). Values are never echoed either way.
    pub secret: bool,
    /// What kind of object holds the site.
    pub kind: Holder,
    carrier: Carrier,
    key: String,
}

impl FoundConfig {
    /// The JSON Patch operations that write `edited` (the parsed text after `edits` were
    /// applied) back into the object.
    pub fn patch(&self, edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation> {
        match &self.carrier {
            Carrier::Helm(site) => site.patch(edited, edits),
            _ => vec![self.replace_text(&edited.to_text())],
        }
    }

    /// Whether the cloud config is held by a ConfigMap (readable more widely than a Secret).
    pub fn is_configmap(&self) -> bool {
        self.kind == Holder::ConfigMap
    }

    /// Where line `line` of the cloud config (or the whole config for `None`) is written in
    /// the object.
    pub fn trace(&self, line: Option<usize>) -> Anchor {
        let field = |name: &str| vec![Seg::key(name), Seg::key(&self.key)];
        match (&self.carrier, line) {
            (Carrier::Helm(site), _) => site.trace(line),
            (Carrier::ConfigMapData, Some(line)) => Anchor::TextLine {
                path: field("data"),
                line,
            },
            (Carrier::SecretStringData, Some(line)) => Anchor::TextLine {
                path: field("stringData"),
                line,
            },
            (Carrier::SecretStringData, None) => Anchor::Node(field("stringData")),
            _ => Anchor::Node(field("data")),
        }
    }

    /// The JSON Patch operation that replaces the text with `new_text`.
    fn replace_text(&self, new_text: &str) -> PatchOperation {
        let (field, value) = match self.carrier {
            Carrier::ConfigMapData => ("data", new_text.to_owned()),
            Carrier::SecretData => (
                "data",
                base64::engine::general_purpose::STANDARD.encode(new_text),
            ),
            Carrier::SecretStringData | Carrier::Helm(_) => ("stringData", new_text.to_owned()),
        };
        PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::from_tokens([field, self.key.as_str()]),
            value: Value::String(value),
        })
    }

    /// JSON pointer of the field holding the text, e.g. `/data/cloud.conf`.
    pub fn pointer(&self) -> String {
        let field = match &self.carrier {
            Carrier::Helm(site) => return site.pointer(),
            Carrier::SecretStringData => "stringData",
            _ => "data",
        };
        PointerBuf::from_tokens([field, self.key.as_str()]).to_string()
    }

    /// `ConfigMap openshift-config/cloud-provider-config, data["config"]`, with a line.
    ///
    /// Helm values name the values path instead, e.g.
    /// `HelmRelease kube-system/occm spec.values.cloudConfig.loadBalancer.provider-requires-serial-api-calls`.
    pub fn describe(&self, line: Option<usize>) -> String {
        if let Carrier::Helm(site) = &self.carrier {
            return site.describe(&self.object, line);
        }
        match line {
            Some(line) => format!("{} {} line {line}", self.object, self.location),
            None => format!("{} {}", self.object, self.location),
        }
    }
}

/// Finds every cloud config `object` holds according to `sites`.
pub fn find(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> Vec<FoundConfig> {
    let kind = match (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) {
        ("", "v1", "ConfigMap") => SiteKind::ConfigMap,
        ("", "v1", "Secret") => SiteKind::Secret,
        _ => return find_helm(gvk, object, sites),
    };
    let name = object.metadata.name.as_deref().unwrap_or("");
    let namespace = object.metadata.namespace.as_deref().unwrap_or("");
    let mut keys: Vec<(String, bool, Option<String>)> = sites
        .sites
        .iter()
        .filter(|s| s.kind == kind && s.name == name && s.namespace == namespace)
        .map(|s| (s.key.clone(), s.mutate, s.note.clone()))
        .collect();
    if let Some(label) = &sites.label
        && let Some(key) = object.metadata.labels.as_ref().and_then(|l| l.get(label))
        && !keys.iter().any(|(k, _, _)| k == key)
    {
        keys.push((key.clone(), true, None));
    }
    let object_name = format!("{} {namespace}/{name}", kind.as_str());
    let mut found = Vec::new();
    for (key, mutable, note) in keys {
        let string_data = object.data.get("stringData").and_then(|d| d.get(&key));
        let data = object.data.get("data").and_then(|d| d.get(&key));
        let (carrier, raw) = match (kind, string_data, data) {
            (SiteKind::Secret, Some(v), _) => (Carrier::SecretStringData, v),
            (SiteKind::Secret, None, Some(v)) => (Carrier::SecretData, v),
            (SiteKind::ConfigMap, _, Some(v)) => (Carrier::ConfigMapData, v),
            _ => continue,
        };
        let location = match carrier {
            Carrier::SecretStringData => format!("stringData[{key:?}]"),
            _ => format!("data[{key:?}]"),
        };
        let text = decode(&carrier, raw, &location);
        found.push(FoundConfig {
            object: object_name.clone(),
            location,
            text,
            mutable,
            note,
            secret: kind == SiteKind::Secret,
            kind: match kind {
                SiteKind::ConfigMap => Holder::ConfigMap,
                SiteKind::Secret => Holder::Secret,
            },
            carrier,
            key,
        });
    }
    found
}

fn find_helm(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> Vec<FoundConfig> {
    let charts = helm::chart_names(sites);
    let object_name = helm::object_name(gvk, object);
    helm::find(gvk, object, &charts)
        .into_iter()
        .map(|f| FoundConfig {
            object: object_name.clone(),
            location: f.location,
            text: f.text,
            mutable: true,
            note: None,
            secret: true,
            kind: Holder::HelmValues,
            carrier: Carrier::Helm(Box::new(f.site)),
            key: String::new(),
        })
        .collect()
}

/// Go's `base64.StdEncoding`: the standard alphabet, `=` padding required, and (not being
/// `.Strict()`) non-zero bits after the last full byte ignored.
const GO_STD_ENCODING: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
);

/// Decodes a Secret's `data` value exactly as the apiserver does. Kubernetes decodes JSON
/// `[]byte` fields with Go's `encoding/json`, which calls `base64.StdEncoding.Decode`
/// (encoding/json/decode.go, `literalStore`); its doc says "New line characters (\r and \n)
/// are ignored" and `decodeQuantum` in encoding/base64/base64.go skips them anywhere, even
/// between the padding characters. So data wrapped at 76 columns (the `base64` tool's
/// default) is accepted by kubectl and the apiserver, and must be here. Any other whitespace
/// is invalid in Go too.
fn decode_base64_like_go(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    if s.contains(['\r', '\n']) {
        let compact: Vec<u8> = s.bytes().filter(|b| !matches!(b, b'\r' | b'\n')).collect();
        GO_STD_ENCODING.decode(compact)
    } else {
        GO_STD_ENCODING.decode(s)
    }
}

fn decode(carrier: &Carrier, raw: &Value, location: &str) -> Result<String, SiteError> {
    let Some(s) = raw.as_str() else {
        return Err(SiteError::NotAString {
            location: location.to_owned(),
        });
    };
    match carrier {
        Carrier::SecretData => {
            let bytes = decode_base64_like_go(s).map_err(|_| SiteError::Base64 {
                location: location.to_owned(),
            })?;
            String::from_utf8(bytes).map_err(|_| SiteError::Utf8 {
                location: location.to_owned(),
            })
        }
        _ => Ok(s.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySet;
    use serde_json::json;

    fn gvk(kind: &str) -> GroupVersionKind {
        GroupVersionKind::gvk("", "v1", kind)
    }

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn base64_is_decoded_as_go_std_encoding_does() {
        let text = "[Global]\nauth-url = https://keystone.example.test:5000/v3\nregion = RegionOne\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n";
        let one_line = base64::engine::general_purpose::STANDARD.encode(text);
        // `base64` wraps at 76 columns with \n; Windows tools write \r\n.
        let wrapped: String = one_line
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8_lossy(c).into_owned() + "\n")
            .collect();
        assert!(wrapped.lines().count() > 1);
        let crlf = wrapped.replace('\n', "\r\n");
        for input in [&one_line, &wrapped, &crlf] {
            assert_eq!(
                decode_base64_like_go(input).as_deref(),
                Ok(text.as_bytes()),
                "{input:?}"
            );
        }
        // Newlines anywhere, even inside the padding, as Go's decodeQuantum skips them.
        assert_eq!(
            decode_base64_like_go("Y\nQ=\r\n=\n").as_deref(),
            Ok(&b"a"[..])
        );
        assert_eq!(decode_base64_like_go("\n").as_deref(), Ok(&b""[..]));
        // Not strict: bits after the last byte are ignored, as StdEncoding (not .Strict()) does.
        assert_eq!(decode_base64_like_go("YR==").as_deref(), Ok(&b"a"[..]));
        // Padding is required and other whitespace is not ignored, as in Go.
        for bad in [
            "YQ", "YQ=", "YQ== ", " YQ==", "Y Q==", "YQ\t==", "YQ==YQ==", "====", "YQ==\x0b",
        ] {
            assert!(decode_base64_like_go(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn wrapped_secret_data_is_found() {
        let sites = PolicySet::embedded().unwrap().sites;
        let encoded = base64::engine::general_purpose::STANDARD
            .encode("[Global]\nregion = RegionOne\n".repeat(4));
        let wrapped: String = encoded
            .as_bytes()
            .chunks(76)
            .map(|c| String::from_utf8_lossy(c).into_owned() + "\n")
            .collect();
        let o = obj(
            json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"cloud-config","namespace":"kube-system"},
            "data":{"cloud.conf": wrapped}}),
        );
        let found = find(&gvk("Secret"), &o, &sites);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].text.as_deref().ok(),
            Some("[Global]\nregion = RegionOne\n".repeat(4).as_str())
        );
    }

    #[test]
    fn finds_default_secret_and_decodes_base64() {
        let sites = PolicySet::embedded().unwrap().sites;
        let o = obj(
            json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"cloud-config","namespace":"kube-system"},
            "data":{"cloud.conf": base64::engine::general_purpose::STANDARD.encode("[Global]\n")}}),
        );
        let found = find(&gvk("Secret"), &o, &sites);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].text.as_deref(), Ok("[Global]\n"));
        assert!(found[0].secret);
        let patch = serde_json::to_value(found[0].replace_text("x")).unwrap();
        assert_eq!(
            patch,
            json!({"op":"replace","path":"/data/cloud.conf","value":"eA=="})
        );
    }

    #[test]
    fn invalid_base64_is_a_site_error_without_content() {
        let sites = PolicySet::embedded().unwrap().sites;
        let o = obj(
            json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"cloud-config","namespace":"kube-system"},
            "data":{"cloud.conf": "not base64 secret-value!"}}),
        );
        let found = find(&gvk("Secret"), &o, &sites);
        let err = found[0].text.clone().unwrap_err().to_string();
        assert_eq!(err, "data[\"cloud.conf\"] is not valid base64");
    }

    #[test]
    fn label_makes_any_configmap_a_site_and_other_kinds_are_not() {
        let sites = PolicySet::embedded().unwrap().sites;
        let v = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"a",
            "labels":{"stackgate.dev/cloud-config":"my.conf"}},"data":{"my.conf":"[Global]\n"}});
        assert_eq!(find(&gvk("ConfigMap"), &obj(v.clone()), &sites).len(), 1);
        assert!(
            find(
                &GroupVersionKind::gvk("apps", "v1", "Deployment"),
                &obj(v),
                &sites
            )
            .is_empty()
        );
    }

    #[test]
    fn operator_copy_is_validate_only() {
        let sites = PolicySet::embedded().unwrap().sites;
        let o = obj(
            json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cloud-conf",
            "namespace":"openshift-cloud-controller-manager"},"data":{"cloud.conf":"[Global]\n"}}),
        );
        let found = find(&gvk("ConfigMap"), &o, &sites);
        assert!(!found[0].mutable);
        assert!(found[0].note.as_deref().unwrap_or("").contains("operator"));
    }
}
