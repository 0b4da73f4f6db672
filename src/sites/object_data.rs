//! ConfigMap and Secret sites, and the two carriers that hold the INI text in one string
//! field: [`TextField`] (verbatim: ConfigMap `data`, Secret `stringData`, and the CCM chart's
//! `cloudConfigContents` in structured values) and [`Base64Field`] (Secret `data`).

use std::borrow::Cow;

use base64::Engine as _;
use json_patch::{PatchOperation, ReplaceOperation};
use kube::core::DynamicObject;
use serde_json::Value;

use super::path::{keyed, pointer, pointer_text, push_decimal};
use super::{
    Anchor, Carrier, FoundConfig, Holder, Location, SiteError, SiteKind, SiteSpec, SitesDocument,
    after_object, kind_namespace_name,
};
use crate::cloudconf::{Document, IniEdit};
use crate::yaml::Seg;

/// Finds the cloud configs of a ConfigMap or Secret: the data keys the sites document names
/// for this object, and the key its `label` names.
pub(super) fn find(
    kind: SiteKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> Vec<FoundConfig> {
    let name = object.metadata.name.as_deref().unwrap_or("");
    let namespace = object.metadata.namespace.as_deref().unwrap_or("");
    // The sites document's entries for this object, borrowed: most objects match none.
    let mut keys: Vec<Cow<'_, SiteSpec>> = sites
        .sites
        .iter()
        .filter(|s| s.kind == kind && s.name == name && s.namespace == namespace)
        .map(Cow::Borrowed)
        .collect();
    // A label is set by whoever knows the object holds an OpenStack cloud config.
    if let Some(label) = &sites.label
        && let Some(key) = object.metadata.labels.as_ref().and_then(|l| l.get(label))
        && !keys.iter().any(|s| &s.key == key)
    {
        keys.push(Cow::Owned(SiteSpec {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.clone(),
            mutate: true,
            note: None,
            other_platforms: false,
            read_by: Vec::new(),
        }));
    }
    if keys.is_empty() {
        return Vec::new();
    }
    let object_name = kind_namespace_name(kind, namespace, name);
    let mut found = Vec::new();
    for spec in keys {
        let key = spec.key.as_str();
        let field = |name: &str| object.data.get(name).and_then(|d| d.get(key));
        let place = |name: &str| (vec![Seg::key(name), Seg::key(key)], keyed(name, key));
        // `stringData` wins over `data`: the apiserver writes it over `data` (only manifests
        // have it; admission sees it merged).
        let mut site = match (kind, field("stringData"), field("data")) {
            (SiteKind::Secret, Some(raw), _) => {
                let (path, location) = place("stringData");
                TextField::found(object_name.clone(), path, location, raw, Holder::Secret)
            }
            (SiteKind::Secret, None, Some(raw)) => {
                let (path, location) = place("data");
                Base64Field::found(object_name.clone(), path, location, raw)
            }
            (SiteKind::ConfigMap, _, Some(raw)) => {
                let (path, location) = place("data");
                TextField::found(object_name.clone(), path, location, raw, Holder::ConfigMap)
            }
            _ => continue,
        };
        site.mutable = spec.mutate;
        site.note.clone_from(&spec.note);
        site.other_platforms = spec.other_platforms;
        site.read_by.clone_from(&spec.read_by);
        found.push(site);
    }
    found
}

/// The cloud config of a plain INI file (`stackgate check`'s synthetic
/// [`super::CONFIG_FILE_KIND`] object): the whole `text`, treated as secret (a cloud.conf
/// holds credentials).
pub(super) fn config_file(object: &DynamicObject) -> Vec<FoundConfig> {
    let Some(raw) = object.data.get("text") else {
        return Vec::new();
    };
    let name = object.metadata.name.clone().unwrap_or_default();
    vec![TextField::found(
        "cloud config file".to_owned(),
        vec![Seg::key("text")],
        name,
        raw,
        Holder::Secret,
    )]
}

/// The INI text verbatim in a string field: ConfigMap `data[key]`, Secret `stringData[key]`
/// (only in manifests; the apiserver merges it into `data` before admission), or the CCM
/// chart's `cloudConfigContents` in structured values.
#[derive(Debug)]
pub(super) struct TextField {
    /// Path of the string field from the object root.
    path: Vec<Seg>,
    /// How messages name the field: `data["config"]`, `spec.values.cloudConfigContents`.
    location: String,
    holder: Holder,
}

impl TextField {
    /// The carrier of the text at `path`, named `location` in messages.
    pub(super) fn new(path: Vec<Seg>, location: String, holder: Holder) -> Self {
        TextField {
            path,
            location,
            holder,
        }
    }

    /// The site whose text is `raw`, the value at `path`.
    pub(super) fn found(
        object: String,
        path: Vec<Seg>,
        location: String,
        raw: &Value,
        holder: Holder,
    ) -> FoundConfig {
        let text = read_string(raw, &location).map(str::to_owned);
        FoundConfig::new(
            object,
            location.clone(),
            text,
            TextField::new(path, location, holder),
        )
    }
}

impl Carrier for TextField {
    fn patch(&self, edited: &Document, _edits: &[IniEdit]) -> Vec<PatchOperation> {
        vec![replace(&self.path, edited.to_text())]
    }

    fn trace(&self, line: Option<usize>) -> Anchor {
        match line {
            Some(line) => Anchor::TextLine {
                path: self.path.clone(),
                line,
            },
            None => Anchor::Node(self.path.clone()),
        }
    }

    fn pointer(&self) -> String {
        pointer_text(&self.path)
    }

    fn describe(&self, line: Option<usize>) -> String {
        describe_line(&self.location, line)
    }

    fn locate_after(&self, object: &str, line: Option<usize>) -> Location {
        data_location(object, &self.location, line)
    }

    fn holder(&self) -> Holder {
        self.holder
    }

    fn path(&self) -> Option<Vec<Seg>> {
        Some(self.path.clone())
    }
}

/// How a ConfigMap's or Secret's data value is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Encoding {
    /// Verbatim: ConfigMap `data`, Secret `stringData`.
    Text,
    /// Base64: Secret `data`.
    Base64,
}

impl Encoding {
    /// The text of `raw`, read as the apiserver reads it (Secret `data`: base64 decoded like
    /// Go, then UTF-8); errors name `location`, never content.
    pub(super) fn decode(self, raw: &str, location: &str) -> Result<String, SiteError> {
        match self {
            Encoding::Text => Ok(raw.to_owned()),
            Encoding::Base64 => {
                let bytes = decode_base64_like_go(raw).map_err(|_| SiteError::Base64 {
                    location: location.to_owned(),
                })?;
                String::from_utf8(bytes).map_err(|_| SiteError::Utf8 {
                    location: location.to_owned(),
                })
            }
        }
    }

    /// `text` stored this way.
    ///
    /// Takes the text borrowed or owned: verbatim, an owned text is moved rather than copied;
    /// base64 reads it where it is.
    pub(super) fn encode<'t>(self, text: impl Into<Cow<'t, str>>) -> String {
        let text = text.into();
        match self {
            Encoding::Text => text.into_owned(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(text.as_bytes()),
        }
    }
}

/// Where a finding in a data field is: the object, the field's description and the line, in
/// one part (what [`describe_line`] says, after the object's name).
fn data_location(object: &str, location: &str, line: Option<usize>) -> Location {
    Location {
        at: after_object(object, location, line),
        field_line: None,
        within: None,
    }
}

/// The INI text base64-encoded in a Secret's `data[key]`, read as the apiserver reads it.
#[derive(Debug)]
pub(super) struct Base64Field {
    /// Path of the string field from the object root.
    path: Vec<Seg>,
    /// How messages name the field: `data["cloud.conf"]`.
    location: String,
}

impl Base64Field {
    /// The site whose encoded text is `raw`, the value at `path`.
    fn found(object: String, path: Vec<Seg>, location: String, raw: &Value) -> FoundConfig {
        let text = read_string(raw, &location).and_then(|s| Encoding::Base64.decode(s, &location));
        FoundConfig::new(
            object,
            location.clone(),
            text,
            Base64Field { path, location },
        )
    }
}

impl Carrier for Base64Field {
    fn patch(&self, edited: &Document, _edits: &[IniEdit]) -> Vec<PatchOperation> {
        let encoded = Encoding::Base64.encode(edited.as_str());
        vec![replace(&self.path, encoded)]
    }

    /// The whole field, whatever the line: a line of the decoded text is nowhere in the
    /// encoded string.
    fn trace(&self, _line: Option<usize>) -> Anchor {
        Anchor::Node(self.path.clone())
    }

    fn pointer(&self) -> String {
        pointer_text(&self.path)
    }

    fn describe(&self, line: Option<usize>) -> String {
        describe_line(&self.location, line)
    }

    fn locate_after(&self, object: &str, line: Option<usize>) -> Location {
        data_location(object, &self.location, line)
    }

    fn holder(&self) -> Holder {
        Holder::Secret
    }

    fn path(&self) -> Option<Vec<Seg>> {
        Some(self.path.clone())
    }
}

/// `raw` as a string, or why not.
fn read_string<'a>(raw: &'a Value, location: &str) -> Result<&'a str, SiteError> {
    raw.as_str().ok_or_else(|| SiteError::NotAString {
        location: location.to_owned(),
    })
}

/// The `replace` of the string at `path` with `value`.
fn replace(path: &[Seg], value: String) -> PatchOperation {
    PatchOperation::Replace(ReplaceOperation {
        path: pointer(path),
        value: Value::String(value),
    })
}

/// `data["config"] line 3`, or the field alone.
fn describe_line(location: &str, line: Option<usize>) -> String {
    match line {
        Some(line) => {
            let mut out = String::with_capacity(location.len() + 16);
            out.push_str(location);
            out.push_str(" line ");
            push_decimal(&mut out, line);
            out
        }
        None => location.to_owned(),
    }
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
pub fn decode_base64_like_go(s: &str) -> Result<Vec<u8>, base64::DecodeError> {
    // Decoded as it is first: `\r` and `\n` are no base64 characters, so a value that decodes
    // holds neither, and the searches for them are made only when it does not (this runs on
    // every Secret site's data, almost always one line). Two searches for one byte each
    // (memchr) rather than one for a set of characters, which looks at each in turn.
    let error = match GO_STD_ENCODING.decode(s) {
        Ok(bytes) => return Ok(bytes),
        Err(error) => error,
    };
    if s.contains('\n') || s.contains('\r') {
        let compact: Vec<u8> = s.bytes().filter(|b| !matches!(b, b'\r' | b'\n')).collect();
        GO_STD_ENCODING.decode(compact)
    } else {
        Err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A named site is the object of that kind, namespace and name: another name in the same
    /// namespace, or another kind of the same name, holds no site.
    #[test]
    fn a_named_site_is_its_kind_namespace_and_name_together() {
        let sites: SitesDocument =
            serde_saphyr::from_str(include_str!("../../policies/cloud-config-sites.yaml"))
                .expect("the default sites document parses");
        let object = |kind: &str, namespace: &str, name: &str| -> DynamicObject {
            serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": kind,
                "metadata": {"name": name, "namespace": namespace},
                "data": {"config": "[Global]\n"}}))
            .expect("an object")
        };
        let found = |kind: SiteKind, o: &DynamicObject| find(kind, o, &sites).len();
        let site = object("ConfigMap", "openshift-config", "cloud-provider-config");
        assert_eq!(found(SiteKind::ConfigMap, &site), 1);
        for (kind, o) in [
            (
                SiteKind::ConfigMap,
                object("ConfigMap", "openshift-config", "other"),
            ),
            (
                SiteKind::ConfigMap,
                object("ConfigMap", "other", "cloud-provider-config"),
            ),
            (
                SiteKind::Secret,
                object("Secret", "openshift-config", "cloud-provider-config"),
            ),
        ] {
            assert_eq!(found(kind, &o), 0, "{kind:?} {:?}", o.metadata);
        }
    }

    /// A ConfigMap's or Secret's finding is located at the object, the data key and the line,
    /// in one part: what its description says.
    #[test]
    fn a_data_site_is_located_at_its_object_key_and_line() {
        let sites: SitesDocument =
            serde_saphyr::from_str(include_str!("../../policies/cloud-config-sites.yaml"))
                .expect("the default sites document parses");
        let text = "[Global]\nregion = r\n";
        let config_map: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
            "data": {"config": text}}))
        .expect("an object");
        let secret: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloud-config", "namespace": "kube-system"},
            "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(text)}}))
        .expect("an object");
        for (kind, object, at) in [
            (
                SiteKind::ConfigMap,
                &config_map,
                "ConfigMap openshift-config/cloud-provider-config data[\"config\"]",
            ),
            (
                SiteKind::Secret,
                &secret,
                "Secret kube-system/cloud-config data[\"cloud.conf\"]",
            ),
        ] {
            let found = find(kind, object, &sites);
            let [site] = found.as_slice() else {
                panic!("one site in {kind:?}: {found:?}");
            };
            for (line, expected) in [(None, at.to_owned()), (Some(12), format!("{at} line 12"))] {
                let located = site.locate(line);
                assert_eq!(located.at, expected);
                assert_eq!((located.field_line, located.within), (None, None));
                assert_eq!(site.describe(line), expected);
            }
        }
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
}
