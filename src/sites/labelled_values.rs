//! Labelled values objects: a ConfigMap or Secret labelled with the sites document's
//! `valuesLabel` (`stackgate.dev/ccm-values=<data key>`) holds the
//! `openstack-cloud-controller-manager` chart's Helm values, as YAML text, under that key —
//! typically a Flux `valuesFrom` source (whose `valuesKey` defaults to `values.yaml`).
//!
//! The webhook sees such an object on its own, never merged with the HelmRelease that reads
//! it, so these values are one values source of a release that may have others (`spec.values`,
//! other `valuesFrom` entries): a site with [`super::FoundConfig::values_source`] set, whose
//! missing settings rules word as missing *here*, not as what the CCM runs. Everything else is
//! a values string as in a HelmChart's `valuesContent`: `cloudConfig` rendered
//! ([`super::render`]) or `cloudConfigContents`, every cloud-config family runs on it.
//!
//! Why by label and not by shape: a YAML text with a `cloudConfig` key is not necessarily the
//! CCM chart's values (other charts use the name), and a wrong finding — or worse, an edit —
//! on someone else's Secret is worse than none. Whoever labels the object says what it is.
//!
//! Edits: the value is ConfigMap `data`, Secret `stringData` (verbatim) or Secret `data`
//! (base64); the edit is the values string's minimal verified edit ([`crate::yaml::edit`]),
//! re-encoded for `data`, as one JSON Patch `replace` of that data value. A value that cannot
//! be edited that way (the probe is the one edit rules make: adding the serial-calls key) is
//! validate-only with a note; the whole values are never rewritten as JSON here, as they are
//! for values strings inside GitOps objects (this text is someone's source file).

use json_patch::{PatchOperation, ReplaceOperation};
use kube::core::DynamicObject;
use serde_json::Value;

use super::generation::Generation;
use super::helm::{self, MAX_VALUES_TEXT_BYTES};
use super::object_data::Encoding;
use super::path::{pointer, pointer_text};
use super::values::{ValuesAt, ValuesText};
use super::{Anchor, Carrier, FoundConfig, Holder, Location, SiteError, SiteKind, SitesDocument};
use crate::budget::Cancel;
use crate::cloudconf::{Document, IniEdit};
use crate::yaml::{self, Seg};

/// Why a labelled values site is validate-only when its values cannot be edited minimally.
const NOT_EDITABLE_NOTE: &str = "stackgate cannot add a line to these values as a minimal \
     verified edit (a YAML alias, a flow mapping or another shape its editor does not change), \
     so edit the values file itself";

/// The edit stackgate's rules make (serial-lb-api-calls adds it), used to probe at discovery
/// whether the values can take an edit (layer 1 cannot name the rule).
const PROBE: IniEdit = IniEdit {
    section: "LoadBalancer",
    key: "provider-requires-serial-api-calls",
    value: "true",
};

/// Whether `object`'s labels mark it as a values object under `sites` (the key it names).
pub fn values_key<'a>(object: &'a DynamicObject, sites: &SitesDocument) -> Option<&'a str> {
    let label = sites.values_label.as_deref()?;
    object
        .metadata
        .labels
        .as_ref()?
        .get(label)
        .map(String::as_str)
}

/// The CCM chart values held by a ConfigMap or Secret labelled with `sites.values_label`: one
/// site (or none when the values switch the chart's Secret off).
///
/// The values string is parsed within `cancel`: once it fires the parse stops, and what is
/// returned is not an answer (the caller checks the flag).
pub(super) fn find(
    kind: SiteKind,
    object: &DynamicObject,
    sites: &SitesDocument,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let (Some(label), Some(key)) = (sites.values_label.as_deref(), values_key(object, sites))
    else {
        return Vec::new();
    };
    let name = object.metadata.name.as_deref().unwrap_or("");
    let namespace = object.metadata.namespace.as_deref().unwrap_or("");
    let object_name = format!("{} {namespace}/{name}", kind.as_str());
    let field = |f: &str| object.data.get(f).and_then(|d| d.get(key));
    // `stringData` wins over `data`: the apiserver writes it over `data`.
    let (field_name, encoding, raw) = match (kind, field("stringData"), field("data")) {
        (SiteKind::Secret, Some(raw), _) => ("stringData", Encoding::Text, Some(raw)),
        (SiteKind::Secret, None, raw) => ("data", Encoding::Base64, raw),
        (SiteKind::ConfigMap, _, raw) => ("data", Encoding::Text, raw),
    };
    let path = vec![Seg::key(field_name), Seg::key(key)];
    let location = format!("{field_name}[{key:?}]");
    let holder = match kind {
        SiteKind::ConfigMap => Holder::ConfigMap,
        SiteKind::Secret => Holder::Secret,
    };
    let carrier = LabelledValues {
        path: path.clone(),
        location: location.clone(),
        encoding,
        holder,
        inner: None,
    };
    let unreadable = |error: SiteError, carrier: LabelledValues| {
        let mut site = FoundConfig::new(object_name.clone(), location.clone(), Err(error), carrier);
        site.mutable = false;
        site.values_source = true;
        vec![site]
    };
    let Some(raw) = raw else {
        let error = SiteError::ValuesKeyMissing {
            location: location.clone(),
            label: label.to_owned(),
        };
        return unreadable(error, carrier);
    };
    let text = match read_text(raw, encoding, &location) {
        Ok(text) => text,
        Err(error) => return unreadable(error, carrier),
    };
    if text.len() > MAX_VALUES_TEXT_BYTES {
        let error = SiteError::TooLarge {
            location: location.clone(),
            size: text.len(),
            limit: MAX_VALUES_TEXT_BYTES,
        };
        return unreadable(error, carrier);
    }
    let values = match yaml::parse_one_within(&text, cancel).and_then(|n| n.to_json()) {
        Ok(values) => values,
        Err(error) => {
            let error = SiteError::Yaml {
                location: location.clone(),
                error,
            };
            return unreadable(error, carrier);
        }
    };
    // The release's chart version is not in a values source: read as the newest generation.
    if !helm::renders_secret(&values, Generation::Route) {
        // The chart renders no cloud-config Secret with these values (an external one is
        // checked on its own).
        return Vec::new();
    }
    let at = ValuesAt {
        path: path.clone(),
        existing: path.len(),
        prefix: format!("{location}, "),
    };
    let inner = helm::in_values_text(
        object_name.clone(),
        ValuesText::new(at, text, values).minimal_only(),
        Generation::Route,
        cancel,
    );
    let carrier = LabelledValues {
        inner: Some(inner.carrier.clone()),
        ..carrier
    };
    let mut site = FoundConfig::holding(object_name, inner.location.clone(), inner.text, carrier);
    site.values_source = true;
    if !takes_an_edit(&site) {
        site.mutable = false;
        site.note = Some(NOT_EDITABLE_NOTE.to_owned());
    }
    vec![site]
}

/// The values text of `raw`, decoded as the apiserver decodes Secret `data`.
fn read_text(raw: &Value, encoding: Encoding, location: &str) -> Result<String, SiteError> {
    let s = raw.as_str().ok_or_else(|| SiteError::NotAString {
        location: location.to_owned(),
    })?;
    encoding.decode(s, location)
}

/// Whether the site's values can take the edit rules make as a minimal verified edit (a
/// config that cannot be read takes none, and needs none).
fn takes_an_edit(site: &FoundConfig) -> bool {
    let Ok(Ok(mut doc)) = site
        .text
        .as_ref()
        .map(|text| Document::parse(text.expose()))
    else {
        return true;
    };
    doc.set(PROBE.section, PROBE.key, PROBE.value);
    !site.patch(&doc, &[PROBE]).is_empty()
}

/// The CCM chart's values as YAML text in a labelled ConfigMap's or Secret's data value.
#[derive(Debug)]
struct LabelledValues {
    /// Path of the data value (`data.values.yaml`).
    path: Vec<Seg>,
    /// `stringData["values.yaml"]`.
    location: String,
    encoding: Encoding,
    holder: Holder,
    /// The carrier of the values string (None when it could not be read).
    inner: Option<std::sync::Arc<dyn Carrier>>,
}

impl Carrier for LabelledValues {
    /// The values string's minimal edit as one `replace` of the data value (base64-encoded
    /// again for Secret `data`); nothing when it cannot be written that way.
    fn patch(&self, edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let ops = inner.patch(edited, edits);
        let target = pointer(&self.path);
        let [PatchOperation::Replace(op)] = ops.as_slice() else {
            return Vec::new();
        };
        let (true, Some(text)) = (op.path == target, op.value.as_str()) else {
            return Vec::new();
        };
        let value = self.encoding.encode(text);
        vec![PatchOperation::Replace(ReplaceOperation {
            path: target,
            value: Value::String(value),
        })]
    }

    /// A line of the values text; the whole value for base64 (the encoded string has no
    /// lines of the text).
    fn trace(&self, line: Option<usize>) -> Anchor {
        match (&self.inner, self.encoding) {
            (Some(inner), Encoding::Text) => inner.trace(line),
            _ => Anchor::Node(self.path.clone()),
        }
    }

    fn pointer(&self) -> String {
        pointer_text(&self.path)
    }

    fn describe(&self, line: Option<usize>) -> String {
        match &self.inner {
            Some(inner) => inner.describe(line),
            None => self.location.clone(),
        }
    }

    fn locate(&self, line: Option<usize>) -> Location {
        match &self.inner {
            Some(inner) => inner.locate(line),
            None => Location {
                at: self.location.clone(),
                field_line: None,
                within: None,
            },
        }
    }

    fn holder(&self) -> Holder {
        self.holder
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret_text::SecretText;
    use base64::Engine as _;
    use kube::core::GroupVersionKind;
    use serde_json::json;

    fn sites() -> SitesDocument {
        serde_saphyr::from_str(include_str!("../../policies/cloud-config-sites.yaml"))
            .expect("the default sites document parses")
    }

    const VALUES: &str = "cloudConfig:\n  global:\n    auth-url: https://keystone.example.test/v3\n  \
                          loadBalancer:\n    lb-provider: amphora\n";

    fn secret(field: &str, value: &str, label: Option<&str>) -> DynamicObject {
        let mut labels = serde_json::Map::new();
        if let Some(key) = label {
            labels.insert("stackgate.dev/ccm-values".into(), json!(key));
        }
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "occm-values", "namespace": "flux-system", "labels": labels},
            field: {"values.yaml": value}}))
        .unwrap()
    }

    fn found(o: &DynamicObject, kind: &str) -> Vec<FoundConfig> {
        super::super::find(&GroupVersionKind::gvk("", "v1", kind), o, &sites())
    }

    fn with_serial(site: &FoundConfig) -> Value {
        let mut doc = Document::parse(site.text.as_ref().map(SecretText::expose).unwrap()).unwrap();
        doc.set(PROBE.section, PROBE.key, PROBE.value);
        serde_json::to_value(site.patch(&doc, &[PROBE])).unwrap()
    }

    const EXPECTED: &str = "cloudConfig:\n  global:\n    auth-url: https://keystone.example.test/v3\n  \
                            loadBalancer:\n    lb-provider: amphora\n    \
                            provider-requires-serial-api-calls: true\n";

    #[test]
    fn string_data_values_are_a_values_source_site_edited_by_one_line() {
        let found = found(&secret("stringData", VALUES, Some("values.yaml")), "Secret");
        assert_eq!(found.len(), 1);
        let site = &found[0];
        assert!(site.values_source && site.secret && site.mutable);
        assert_eq!(
            site.describe(Some(2)),
            "Secret flux-system/occm-values stringData[\"values.yaml\"], \
             cloudConfig.global.auth-url (line 3 of the values)"
        );
        assert_eq!(
            with_serial(site),
            json!([{"op": "replace", "path": "/stringData/values.yaml", "value": EXPECTED}])
        );
    }

    #[test]
    fn base64_data_is_decoded_and_the_edit_encoded_again() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let found = found(
            &secret("data", &b64.encode(VALUES), Some("values.yaml")),
            "Secret",
        );
        let patch = with_serial(&found[0]);
        assert_eq!(patch[0]["path"], "/data/values.yaml");
        let written = b64.decode(patch[0]["value"].as_str().unwrap()).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), EXPECTED);
        assert_eq!(
            found[0].trace(Some(2)),
            Anchor::Node(vec![Seg::key("data"), Seg::key("values.yaml")])
        );
    }

    #[test]
    fn unlabelled_objects_and_values_without_the_chart_secret_are_not_sites() {
        assert!(found(&secret("stringData", VALUES, None), "Secret").is_empty());
        let off = "secret:\n  enabled: false\ncloudConfig: {}\n";
        assert!(found(&secret("stringData", off, Some("values.yaml")), "Secret").is_empty());
    }

    #[test]
    fn a_missing_key_bad_yaml_and_oversized_text_are_site_errors_without_content() {
        let site = &found(&secret("stringData", VALUES, Some("other.yaml")), "Secret")[0];
        assert_eq!(
            site.text.clone().unwrap_err(),
            SiteError::ValuesKeyMissing {
                location: "data[\"other.yaml\"]".into(),
                label: "stackgate.dev/ccm-values".into()
            }
        );
        assert!(!site.mutable);
        let site = &found(
            &secret("stringData", "a: [secret-value\n", Some("values.yaml")),
            "Secret",
        )[0];
        let error = site.text.clone().unwrap_err().to_string();
        assert!(error.starts_with("stringData[\"values.yaml\"] is not valid YAML"));
        assert!(!error.contains("secret-value"), "{error}");
        let big = format!("{VALUES}# {}\n", "x".repeat(MAX_VALUES_TEXT_BYTES));
        let site = &found(&secret("stringData", &big, Some("values.yaml")), "Secret")[0];
        assert!(matches!(site.text, Err(SiteError::TooLarge { .. })));
    }

    #[test]
    fn values_that_take_no_minimal_edit_are_validate_only() {
        // The section is an alias of a map elsewhere: adding a key to it would change the
        // anchor's other uses, so the editor refuses and nothing is written.
        let aliased = "common: &lb\n  lb-provider: amphora\ncloudConfig:\n  loadBalancer: *lb\n";
        let site = &found(
            &secret("stringData", aliased, Some("values.yaml")),
            "Secret",
        )[0];
        assert!(!site.mutable);
        assert!(site.note.as_deref().unwrap_or("").contains("minimal"));
        assert_eq!(with_serial(site), json!([]));
        // A flow mapping takes the edit as one verified change.
        let flow = "cloudConfig: {loadBalancer: {lb-provider: amphora}}\n";
        let site = &found(&secret("stringData", flow, Some("values.yaml")), "Secret")[0];
        assert!(site.mutable);
        assert_eq!(
            with_serial(site)[0]["value"],
            "cloudConfig: {loadBalancer: {lb-provider: amphora, \
             provider-requires-serial-api-calls: true}}\n"
        );
    }

    #[test]
    fn a_configmap_holds_values_too() {
        let cm: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1",
            "kind": "ConfigMap", "metadata": {"name": "v", "namespace": "a",
            "labels": {"stackgate.dev/ccm-values": "values.yaml"}},
            "data": {"values.yaml": VALUES}}))
        .unwrap();
        let found = found(&cm, "ConfigMap");
        assert_eq!(found.len(), 1);
        assert!(found[0].is_configmap() && !found[0].secret && found[0].values_source);
    }
}
