//! Cluster API `ClusterResourceSet` payloads: a Secret of type
//! `addons.cluster.x-k8s.io/resource-set` (or a ConfigMap) whose `data` / `stringData`
//! values are YAML manifests that the ClusterResourceSet controller applies to workload
//! clusters. The standard way CAPI clusters get their CCM config is a
//! `kube-system/cloud-config` Secret embedded this way (cluster-api-provider-openstack's
//! `cluster-resource-sets` kustomize component).
//!
//! Each embedded document that is a ConfigMap or Secret site (`object_data::find`)
//! becomes a site of the outer object, carried by `PayloadSite`: its messages name the
//! outer field, the document and the inner object; its lines map to lines of the outer
//! string; its edit is the inner carrier's JSON Patch written into the embedded YAML with
//! the verified minimal editor ([`crate::yaml::edit`]) and then into the outer field
//! (base64-encoded again for a Secret's `data`).
//!
//! Which objects are payloads:
//! - a Secret of type `addons.cluster.x-k8s.io/resource-set`: CAPI requires that type for a
//!   Secret a ClusterResourceSet names, so every data key is a payload;
//! - a ConfigMap, by shape: CAPI gives ConfigMap payloads no marker, and the webhook sees
//!   one object at a time (not the ClusterResourceSet naming it). A ConfigMap value that
//!   parses as Kubernetes manifests of which one is a cloud-config site is treated as a
//!   payload; anything else in a ConfigMap is not looked at (no finding, even on YAML
//!   errors: it need not be a manifest at all).
//!
//! A value is parsed only when its text mentions a site's name or the site label
//! ([`may_hold_site`]), or an OpenStack CCM marker ([`may_hold_ccm`]): CNI payloads of
//! hundreds of KiB that hold neither cost a few substring scans, not a YAML parse. A value is
//! parsed once for both uses. The prefilter is sound: YAML can spell a name only through an
//! escape of a double-quoted scalar (`"\x6bind"`, `"cloud\u002dconfig"`, a line folded with
//! `\` at its end; plain and single-quoted scalars fold line breaks into spaces, which no name
//! holds), so the text is also searched with every escape read ([`unescape`]); when the text
//! is JSON holding YAML (the raw JSON of an object), twice.
//!
//! Embedded objects ([`EmbeddedObject`]): every document of a payload value whose own text
//! holds a CCM marker (a CCM DaemonSet or Deployment, a HelmChart of the CCM chart) is handed
//! to the engine, which runs the object families on it as a CREATE of that object: a payload
//! is what the ClusterResourceSet controller creates in a workload cluster. Findings name the
//! outer field, the document and the line of the field in the payload text (in `check`, the
//! line of the file).
//!
//! Why edits are safe: the outer value is rewritten only when the embedded text, edited
//! with one verified minimal change per JSON Patch operation, reads back as the inner object
//! with the patch applied ([`crate::yaml::edit::apply`] refuses anything else); the rest of
//! the payload (other documents, comments, key order) is byte for byte what it was. Sites
//! that cannot be edited that way are validate-only, with a note saying where to fix: an
//! inner value reached through a YAML alias, a value that is not a plain string, or two
//! cloud configs in one payload value (one review's patch replaces the whole value once).

use std::borrow::Cow;
use std::sync::Arc;

use json_patch::{PatchOperation, ReplaceOperation};
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::object_data::Encoding;
use super::path::{keyed, pointer, pointer_text};
use super::{
    Anchor, Carrier, FoundConfig, Holder, Location, SiteError, SiteKind, SitesDocument,
    kind_namespace_name,
};
use crate::budget::Cancel;
use crate::cloudconf::{Document, IniEdit};
use crate::yaml::edit::{self as yamledit, Change};
use crate::yaml::{self, Node, Seg};

/// How messages name a ClusterResourceSet payload value.
const CRS_PAYLOAD: &str = "ClusterResourceSet payload";

/// The Secret type Cluster API requires of a Secret a ClusterResourceSet names.
pub const RESOURCE_SET_SECRET_TYPE: &str = "addons.cluster.x-k8s.io/resource-set";

/// Largest payload value stackgate parses, in bytes. The apiserver stores objects of at most
/// about 1.5 MiB; a CCM payload (its Secret, RBAC and DaemonSet) is a few KiB.
pub const MAX_PAYLOAD_TEXT_BYTES: usize = 1024 * 1024;

/// Why a payload site is validate-only when the inner object's place is not editable.
const NOT_EDITABLE_NOTE: &str = "it is embedded in a ClusterResourceSet payload where \
     stackgate cannot write a minimal verified edit (a YAML alias, a value that is not a \
     string, or more than one cloud config in the same payload value), so edit the embedded \
     manifest itself";

/// Whether `secret_type` is the ClusterResourceSet payload type.
pub fn is_payload_secret_type(secret_type: Option<&str>) -> bool {
    secret_type == Some(RESOURCE_SET_SECRET_TYPE)
}

/// Whether `text` (a payload value, or the raw JSON of a whole object) may embed a site: it
/// names a `kind` and mentions the name of a site in `sites` or the site label. Cheap (a few
/// substring scans); a true answer only means "worth parsing".
pub fn may_hold_site(text: &str, sites: &SitesDocument) -> bool {
    let plain = plain_needles(site_needles(sites));
    spellings(text, plain, |text| {
        text.contains("kind") && names_a_site(text, sites)
    })
}

/// The names [`names_a_site`] searches for.
fn site_needles(sites: &SitesDocument) -> impl Iterator<Item = &str> {
    sites
        .sites
        .iter()
        .map(|s| s.name.as_str())
        .chain(sites.label.as_deref())
}

/// Whether `text` (one spelling) mentions the name of a site in `sites` or the site label.
fn names_a_site(text: &str, sites: &SitesDocument) -> bool {
    sites.sites.iter().any(|s| text.contains(s.name.as_str()))
        || sites.label.as_deref().is_some_and(|l| text.contains(l))
}

/// Whether `text` spells `kind`, as written or with its YAML escapes read: a YAML text that
/// does not has no document with a `kind` key ([`may_hold_site`] and [`may_hold_ccm`] ask it
/// of the same spelling as the names).
fn spells_kind(text: &str) -> bool {
    // `kind` holds no character of PLAIN_ESCAPED.
    spellings(text, true, |text| text.contains("kind"))
}

/// Whether `text` (one spelling) holds a CCM marker ([`CCM_MARKERS`]).
fn names_a_ccm(text: &str) -> bool {
    CCM_MARKERS.iter().any(|m| text.contains(m))
}

/// Whether `text` mentions one of `names`, as written or with its YAML escapes read: a YAML
/// text without such a mention has no key or value spelling one of them.
pub(super) fn mentions(text: &str, names: &[String]) -> bool {
    let plain = plain_needles(names.iter().map(String::as_str));
    spellings(text, plain, |text| {
        names.iter().any(|n| text.contains(n.as_str()))
    })
}

/// The characters the common escapes of a JSON string stand for (`\n`, `\t`, `\r`, `\"`):
/// a name without them cannot be spelled across such an escape.
const PLAIN_ESCAPED: [char; 4] = ['\n', '\t', '\r', '"'];

/// Whether no needle holds a character of [`PLAIN_ESCAPED`] (so [`spellings`] may skip
/// unescaping a text whose only escapes are those).
fn plain_needles<'a>(mut needles: impl Iterator<Item = &'a str>) -> bool {
    needles.all(|n| !n.contains(PLAIN_ESCAPED))
}

/// Whether every backslash of `text` begins one of the escapes `\n`, `\t`, `\r` or `\"`.
fn only_plain_escapes(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut pos = 0;
    while let Some(offset) = text[pos..].find('\\') {
        let at = pos + offset;
        if !matches!(bytes.get(at + 1), Some(b'n' | b't' | b'r' | b'"')) {
            return false;
        }
        pos = at + 2;
    }
    true
}

/// Whether `test` holds for `text` as written, or with its escapes read once (YAML in a
/// payload value) or twice (YAML in a string of an object's raw JSON). Text without a
/// backslash has no escape, so that is one test.
///
/// `test` must be a search for names (true as soon as the text contains the right ones,
/// as `contains` is), and `plain` must say that none of them holds a character of
/// [`PLAIN_ESCAPED`]. Then a text whose only escapes are `\n`, `\t`, `\r` and `\"` (most of
/// an object's raw JSON) is one test too: reading those escapes puts a character no name
/// holds between the runs of the text, so a name found in the unescaped text lies inside
/// one run and was found as written, and the unescaped text has no backslash left.
fn spellings(text: &str, plain: bool, test: impl Fn(&str) -> bool) -> bool {
    if test(text) {
        return true;
    }
    if !text.contains('\\') || (plain && only_plain_escapes(text)) {
        return false;
    }
    let once = unescape(text);
    if test(&once) {
        return true;
    }
    once.contains('\\') && test(&unescape(&once))
}

/// `text` with every escape of a YAML double-quoted scalar read (JSON's escapes are a subset):
/// `\xNN`, `\uNNNN`, `\UNNNNNNNN`, the one-character escapes, and an escaped line break with
/// the next line's leading blanks (a folded line joined without a space). Applied to the whole
/// text, not only to quoted scalars: the result is only searched, and the text as written is
/// searched too, so an escape read where it is not one cannot hide a name. An invalid escape
/// is kept as written. Linear in the text.
pub fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    // Runs without a backslash are copied whole: the scan is a byte search, and most text
    // (an object's raw JSON, a payload) has few escapes.
    let mut pos = 0;
    while let Some(offset) = text[pos..].find('\\') {
        let at = pos + offset;
        out.push_str(&text[pos..at]);
        let Some(next) = text[at + 1..].chars().next() else {
            out.push('\\');
            return out;
        };
        let after_next = at + 1 + next.len_utf8();
        if let Some(decoded) = simple_escape(next) {
            out.push(decoded);
            pos = after_next;
            continue;
        }
        let hex = |len: usize| {
            text.get(at + 2..at + 2 + len)
                .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
        };
        let long = match next {
            'x' => hex(2).map(|c| (c, 2)),
            'u' => hex(4).map(|c| (c, 4)),
            'U' => hex(8).map(|c| (c, 8)),
            _ => None,
        };
        if let Some((decoded, len)) = long {
            out.push(decoded);
            // The digits are ASCII: one byte each.
            pos = after_next + len;
            continue;
        }
        if next == '\n' || next == '\r' {
            // An escaped line break: the break and the next line's leading blanks go.
            pos = after_next;
            if next == '\r' && text[pos..].starts_with('\n') {
                pos += 1;
            }
            pos += text[pos..].len() - text[pos..].trim_start_matches([' ', '\t']).len();
            continue;
        }
        // Not an escape: the backslash stays, and what follows is read as text.
        out.push('\\');
        pos = at + 1;
    }
    out.push_str(&text[pos..]);
    out
}

/// What a one-character escape of a YAML double-quoted scalar stands for (`\n` → newline).
fn simple_escape(next: char) -> Option<char> {
    match next {
        '0' => Some('\0'),
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        't' | '\t' => Some('\t'),
        'n' => Some('\n'),
        'v' => Some('\u{b}'),
        'f' => Some('\u{c}'),
        'r' => Some('\r'),
        'e' => Some('\u{1b}'),
        ' ' => Some(' '),
        '"' => Some('"'),
        '/' => Some('/'),
        '\\' => Some('\\'),
        'N' => Some('\u{85}'),
        '_' => Some('\u{a0}'),
        'L' => Some('\u{2028}'),
        'P' => Some('\u{2029}'),
        _ => None,
    }
}

/// Substrings of which a payload document must hold one for the object families to read it:
/// the CCM's image and chart name, and the default `ccmArgs` marker. A CCM recognised only by
/// a policy's custom `ccmImages` / `ccmArgs` that mention neither is not read inside a
/// payload (the markers are policy parameters of the families; this layer cannot see them).
pub const CCM_MARKERS: &[&str] = &[
    "openstack-cloud-controller-manager",
    "--cloud-provider=openstack",
];

/// Whether `text` (a payload value, a document of one, or the raw JSON of a whole object) may
/// embed an object the object families read: it names a `kind` and holds a CCM marker
/// ([`CCM_MARKERS`]). Cheap; a true answer only means "worth parsing".
pub fn may_hold_ccm(text: &str) -> bool {
    let plain = plain_needles(CCM_MARKERS.iter().copied());
    spellings(text, plain, |text| {
        text.contains("kind") && names_a_ccm(text)
    })
}

/// Whether a payload value is worth parsing at all: it may embed a site or a CCM object.
pub fn worth_parsing(text: &str, sites: &SitesDocument) -> bool {
    let charts = super::chart_names_of(sites);
    let plain = plain_needles(
        site_needles(sites)
            .chain(CCM_MARKERS.iter().copied())
            .chain(charts.iter().map(String::as_str)),
    );
    // One pass over the spellings for both questions: the text is unescaped at most twice.
    spellings(text, plain, |text| {
        text.contains("kind")
            && (names_a_site(text, sites)
                || names_a_ccm(text)
                || charts.iter().any(|c| text.contains(c.as_str())))
    })
}

/// An object embedded in a payload value, for the object families. Object families only
/// validate it: nothing they find is ever written back into the payload.
#[derive(Debug, Clone)]
pub struct EmbeddedObject {
    /// Group, version and kind of the inner object.
    pub gvk: GroupVersionKind,
    /// The inner object.
    pub object: DynamicObject,
    /// Path of the payload value in the outer object.
    pub value_path: Vec<Seg>,
    /// `stringData["ccm.yaml"]`.
    pub location: String,
    /// 0-based index of the document in the payload value.
    pub doc: usize,
    /// The document's tree, to locate the inner object's fields in the payload text.
    root: Node,
    encoding: Encoding,
}

impl EmbeddedObject {
    /// JSON pointer of the payload value in the outer object (`/data/ccm.yaml`).
    pub fn pointer(&self) -> String {
        pointer_text(&self.value_path)
    }

    /// The 1-based line, in the (decoded) payload text, of the inner object's field at the
    /// JSON pointer `inner` (the line of its key, or of the item in a list); the document's
    /// first line when there is no pointer or it does not resolve.
    pub fn line(&self, inner: Option<&str>) -> usize {
        let Some(ptr) = inner.and_then(|p| jsonptr::Pointer::parse(p).ok()) else {
            return self.root.start.line;
        };
        let mut node = Some(&self.root);
        let mut path = Vec::new();
        for token in ptr.tokens() {
            let t = token.decoded().into_owned();
            let seg = match (node.map(|n| &n.kind), t.parse::<usize>()) {
                (Some(yaml::Kind::Seq(_)), Ok(i)) => Seg::Index(i),
                _ => Seg::Key(t),
            };
            node = node.and_then(|n| n.child(&seg));
            path.push(seg);
        }
        let (used, _, line) = self.root.deepest(&path);
        if used == 0 {
            self.root.start.line
        } else {
            line
        }
    }

    /// Where line `line` of the payload text is written in the outer object: that line of the
    /// string (a base64 value has no lines: the field).
    pub fn trace(&self, line: usize) -> Anchor {
        match self.encoding {
            Encoding::Text => Anchor::TextLine {
                path: self.value_path.clone(),
                line,
            },
            Encoding::Base64 => Anchor::Node(self.value_path.clone()),
        }
    }

    /// The inner object: `DaemonSet kube-system/openstack-cloud-controller-manager`.
    pub fn reference(&self) -> String {
        let name = self.object.metadata.name.as_deref().unwrap_or("");
        match self.object.metadata.namespace.as_deref() {
            Some(ns) => format!("{} {ns}/{name}", self.gvk.kind),
            None => format!("{} {name}", self.gvk.kind),
        }
    }

    /// `ClusterResourceSet payload stringData["ccm.yaml"] document 2 (DaemonSet
    /// kube-system/openstack-cloud-controller-manager) line 57`: the outer object is not named;
    /// the line is a line of the decoded payload text; the inner object is named unless
    /// `named_after` (the message that follows names it first).
    pub fn describe(&self, line: usize, named_after: bool) -> String {
        let inner = if named_after {
            String::new()
        } else {
            format!(" ({})", self.reference())
        };
        format!(
            "ClusterResourceSet payload {} document {}{inner} line {line}",
            self.location,
            self.doc + 1
        )
    }
}

/// Whether `object` is a ConfigMap whose payload embeds a Secret's cloud config (tools that
/// show diffs must mask it as they mask a Secret).
pub fn embeds_secret(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> bool {
    (gvk.group.as_str(), gvk.version.as_str(), gvk.kind.as_str()) == ("", "v1", "ConfigMap")
        && find(SiteKind::ConfigMap, object, sites)
            .iter()
            .any(|s| s.secret)
}

/// The sites embedded in the payload values of `object` (a ConfigMap or Secret).
pub(super) fn find(
    kind: SiteKind,
    object: &DynamicObject,
    sites: &SitesDocument,
) -> Vec<FoundConfig> {
    find_within(kind, object, sites, &Cancel::never())
}

/// [`find`] that stops reading once `cancel` fires (see [`scan`]).
pub(super) fn find_within(
    kind: SiteKind,
    object: &DynamicObject,
    sites: &SitesDocument,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    scan(kind, object, sites, false, cancel).0
}

/// The sites and the CCM objects (`objects`: when asked for) embedded in the payload values
/// of `object` (a ConfigMap or Secret), each value parsed at most once.
///
/// Once `cancel` fires no value is parsed and no document read any more (a payload holds up
/// to [`MAX_PAYLOAD_TEXT_BYTES`] of manifests per value): what is returned then is not an
/// answer, and the caller checks the flag before it uses it.
pub(super) fn scan(
    kind: SiteKind,
    object: &DynamicObject,
    sites: &SitesDocument,
    objects: bool,
    cancel: &Cancel,
) -> (Vec<FoundConfig>, Vec<EmbeddedObject>) {
    let secret_payload = kind == SiteKind::Secret
        && is_payload_secret_type(object.data.get("type").and_then(Value::as_str));
    if kind == SiteKind::Secret && !secret_payload {
        return (Vec::new(), Vec::new());
    }
    let name = object.metadata.name.as_deref().unwrap_or("");
    let namespace = object.metadata.namespace.as_deref().unwrap_or("");
    // Named only for a value that may hold something: most values (a site's own INI text)
    // hold nothing, and the scan runs for every site ConfigMap.
    let outer = || kind_namespace_name(kind, namespace, name);
    let mut found = Vec::new();
    let mut embedded = Vec::new();
    // `stringData` first: it wins over `data` for the same key (the apiserver writes it over).
    let fields: &[(&str, Encoding)] = match kind {
        SiteKind::Secret => &[("stringData", Encoding::Text), ("data", Encoding::Base64)],
        SiteKind::ConfigMap => &[("data", Encoding::Text)],
    };
    let mut seen: Vec<&str> = Vec::new();
    let charts = super::chart_names_of(sites);
    for (field, encoding) in fields {
        let Some(map) = object.data.get(*field).and_then(Value::as_object) else {
            continue;
        };
        for (key, raw) in map {
            if cancel.is_cancelled() {
                return (found, embedded);
            }
            if seen.contains(&key.as_str()) {
                continue;
            }
            seen.push(key);
            let location = || keyed(field, key);
            let Some(raw) = raw.as_str() else {
                continue;
            };
            let text = match encoding {
                Encoding::Text => Cow::Borrowed(raw),
                Encoding::Base64 => match encoding.decode(raw, &location()) {
                    Ok(text) => Cow::Owned(text),
                    // Not a manifest CAPI can apply either; nothing says a cloud config is in
                    // it, so nothing is claimed about one.
                    Err(_) => continue,
                },
            };
            // Whatever is read in a value is a document with a `kind` (a site, a CCM object, a
            // carrier of chart values): a value that spells no `kind` (a site's own INI text)
            // holds none of them, and is not searched for names.
            if !spells_kind(&text) {
                continue;
            }
            let site_here = may_hold_site(&text, sites);
            let ccm_here = objects && may_hold_ccm(&text);
            let values_here = mentions(&text, charts);
            if !site_here && !ccm_here && !values_here {
                continue;
            }
            let value = PayloadValue {
                label: CRS_PAYLOAD,
                inner_holder: false,
                values: values_here,
                outer: outer(),
                path: vec![Seg::key(field), Seg::key(key)],
                location: location(),
                encoding: *encoding,
                text: text.into_owned(),
            };
            let docs = match value.parse(site_here && secret_payload, cancel) {
                Ok(docs) => docs,
                Err(unreadable) => {
                    found.extend(unreadable);
                    continue;
                }
            };
            if site_here || values_here {
                found.extend(value.sites(&docs, sites, secret_payload, cancel));
            }
            if ccm_here {
                embedded.extend(value.objects(&docs, cancel));
            }
        }
    }
    (found, embedded)
}

/// The configs in a manifest stream nested in a string field of `object` (its value `text` at
/// `path`, named `location`): Rancher's `additionalManifest`, an Azimuth `Manifests` template
/// without template syntax, a file a k0smotron control plane writes into its manifests
/// directory. The one reader of nested manifests: ClusterResourceSet payloads go through it
/// too. Each document that is a cloud-config site, or carries the CCM chart's values (a
/// HelmChart, a k0s `Chart`, a Flux HelmRelease, …), is a site of the outer object named
/// `label location document N (inner)`, edited in place with the verified minimal editor.
/// A text that names no site and no chart is not parsed; one over [`MAX_PAYLOAD_TEXT_BYTES`]
/// or not YAML is reported (it names one).
pub(super) fn read_nested(
    outer: String,
    label: &'static str,
    (path, location): (Vec<Seg>, String),
    text: &str,
    sites: &SitesDocument,
    cancel: &Cancel,
) -> Vec<FoundConfig> {
    let charts = super::chart_names_of(sites);
    let values = mentions(text, charts);
    if !values && !may_hold_site(text, sites) {
        return Vec::new();
    }
    let value = PayloadValue {
        label,
        inner_holder: true,
        values,
        outer,
        path,
        location,
        encoding: Encoding::Text,
        text: text.to_owned(),
    };
    match value.parse(true, cancel) {
        Ok(docs) => value.sites(&docs, sites, false, cancel),
        Err(unreadable) => unreadable,
    }
}

/// One payload value of the outer object.
struct PayloadValue {
    /// How messages name the carrier: `ClusterResourceSet payload`, `additionalManifest`.
    label: &'static str,
    /// Whether a config found in it is held as its inner object holds it (a stream nested in
    /// a cluster object); false: a ClusterResourceSet payload's rule ([`PayloadValue::sites`]).
    inner_holder: bool,
    /// Whether documents that carry Helm chart values (a HelmChart, a k0s `Chart`, …) are read
    /// too, not only ConfigMaps and Secrets.
    values: bool,
    /// `Secret ns/name`.
    outer: String,
    /// Path of the value in the outer object.
    path: Vec<Seg>,
    /// `stringData["cloud-config-secret.yaml"]`.
    location: String,
    encoding: Encoding,
    /// The embedded manifests (decoded).
    text: String,
}

impl PayloadValue {
    /// The documents of this value, or what to report instead: `reported`, problems reading
    /// the value are an unreadable site (a Secret of the payload type that may hold a site);
    /// otherwise (a ConfigMap, or a value read only for CCM objects) a value that is not
    /// manifests is simply not looked at (`Err` of nothing).
    fn parse(
        &self,
        reported: bool,
        cancel: &Cancel,
    ) -> Result<Vec<yaml::YamlDoc>, Vec<FoundConfig>> {
        let unreadable = |error: SiteError| {
            let carrier = PayloadSite {
                label: self.label,
                value_path: self.path.clone(),
                value_location: self.location.clone(),
                encoding: self.encoding,
                payload: Arc::from(""),
                doc: 0,
                inner_describe: String::new(),
                inner: None,
                inner_node: None,
                holder: if self.encoding == Encoding::Base64 || reported {
                    Holder::Secret
                } else {
                    Holder::ConfigMap
                },
            };
            let mut site = FoundConfig::new(
                self.outer.clone(),
                self.location.clone(),
                Err(error),
                carrier,
            );
            site.mutable = false;
            vec![site]
        };
        if self.text.len() > MAX_PAYLOAD_TEXT_BYTES {
            return Err(if reported {
                unreadable(SiteError::TooLarge {
                    location: format!("{} {}", self.label, self.location),
                    size: self.text.len(),
                    limit: MAX_PAYLOAD_TEXT_BYTES,
                })
            } else {
                Vec::new()
            });
        }
        match yaml::parse_stream_within(&self.text, cancel) {
            Ok(docs) => Ok(docs),
            Err(error) if reported => Err(unreadable(SiteError::Yaml {
                location: format!("{} {}", self.label, self.location),
                error,
            })),
            Err(_) => Err(Vec::new()),
        }
    }

    /// The site of a cloud config that is a clusterctl / envsubst variable: unseen, validate-only.
    fn unseen_variable(&self, doc: usize, inner: &str, variable: &str) -> FoundConfig {
        let location = format!(
            "{} {} document {} ({})",
            self.label,
            self.location,
            doc + 1,
            inner.trim_end()
        );
        let error = SiteError::Unseen {
            location: location.clone(),
            sources: format!("the clusterctl variable {}", variable.trim()),
        };
        let carrier = PayloadSite {
            label: self.label,
            value_path: self.path.clone(),
            value_location: self.location.clone(),
            encoding: self.encoding,
            payload: Arc::from(""),
            doc,
            inner_describe: String::new(),
            inner: None,
            inner_node: None,
            holder: Holder::Secret,
        };
        let mut site = FoundConfig::new(self.outer.clone(), location, Err(error), carrier);
        site.mutable = false;
        site.secret = true;
        site
    }

    /// The documents of this value that hold a CCM marker, as objects (documents that are not
    /// Kubernetes objects are skipped).
    fn objects(&self, docs: &[yaml::YamlDoc], cancel: &Cancel) -> Vec<EmbeddedObject> {
        let mut out = Vec::new();
        for doc in docs {
            if cancel.is_cancelled() {
                break;
            }
            let text = self
                .text
                .get(doc.root.start.byte..doc.root.end.byte)
                .unwrap_or("");
            if !may_hold_ccm(text) {
                continue;
            }
            let Ok(json) = doc.root.to_json() else {
                continue;
            };
            let (Some(api_version), Some(kind)) = (
                json.get("apiVersion").and_then(Value::as_str),
                json.get("kind").and_then(Value::as_str),
            ) else {
                continue;
            };
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind);
            let Ok(object) = serde_json::from_value::<DynamicObject>(json) else {
                continue;
            };
            out.push(EmbeddedObject {
                gvk,
                object,
                value_path: self.path.clone(),
                location: self.location.clone(),
                doc: doc.index,
                root: doc.root.clone(),
                encoding: self.encoding,
            });
        }
        out
    }

    /// The sites in this value's documents. `reported`: the outer object is a Secret of the
    /// payload type (its configs are Secrets).
    fn sites(
        &self,
        docs: &[yaml::YamlDoc],
        sites: &SitesDocument,
        reported: bool,
        cancel: &Cancel,
    ) -> Vec<FoundConfig> {
        let mut found: Vec<FoundConfig> = Vec::new();
        let shared: Arc<str> = Arc::from(self.text.as_str());
        for doc in docs {
            if cancel.is_cancelled() {
                break;
            }
            let Ok(json) = doc.root.to_json() else {
                continue;
            };
            let api_version = json.get("apiVersion").and_then(Value::as_str).unwrap_or("");
            let kind_name = json.get("kind").and_then(Value::as_str).unwrap_or("");
            let kind = match (api_version, kind_name) {
                ("v1", "ConfigMap") => Some(SiteKind::ConfigMap),
                ("v1", "Secret") => Some(SiteKind::Secret),
                _ if self.values && !kind_name.is_empty() => None,
                _ => continue,
            };
            let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
            let gvk = GroupVersionKind::gvk(group, version, kind_name);
            let Ok(inner) = serde_json::from_value::<DynamicObject>(json) else {
                continue;
            };
            let inner_sites = match kind {
                Some(kind) => super::object_data::find(kind, &inner, sites),
                // The chart's values in a values carrier (one level: a carrier nested in a
                // nested stream is not read again).
                None => super::chart_values_sites(&gvk, &inner, sites, cancel),
            };
            for site in inner_sites {
                // A data key's path, or the values field's (a values string is edited in place).
                let inner_path = site.carrier.path().or_else(|| {
                    kind.is_none().then(|| {
                        jsonptr::Pointer::parse(&site.pointer())
                            .map(|p| {
                                p.tokens()
                                    .map(|t| Seg::Key(t.decoded().into_owned()))
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                });
                if let Some(variable) = inner_path
                    .as_deref()
                    .and_then(|p| string_at(&inner.data, p))
                    .filter(|raw| is_substitution_variable(raw))
                {
                    // `${OPENSTACK_CLOUD_PROVIDER_CONF_B64}`: clusterctl (or Flux) substitutes
                    // it before anything is applied, so the config is not here to check: said
                    // as unseen (naming the variable, never a value), like `valuesFrom`.
                    found.push(self.unseen_variable(doc.index, &site.describe(None), variable));
                    continue;
                }
                let inner_node = inner_path
                    .as_deref()
                    .and_then(|p| doc.root.at(p))
                    .filter(|_| !doc.root.alias_on_path(inner_path.as_deref().unwrap_or(&[])))
                    .filter(|n| n.scalar().is_some() && !n.is_null())
                    .cloned();
                let inner_describe = format!(
                    "document {} ({})",
                    doc.index + 1,
                    site.describe(None).trim_end()
                );
                let editable = inner_node.is_some();
                let secret = site.secret;
                let mutable = site.mutable && editable;
                let note = if site.mutable && !editable {
                    Some(NOT_EDITABLE_NOTE.to_owned())
                } else {
                    site.note.clone()
                };
                let other_platforms = site.other_platforms;
                let carrier = PayloadSite {
                    label: self.label,
                    value_path: self.path.clone(),
                    value_location: self.location.clone(),
                    encoding: self.encoding,
                    payload: Arc::clone(&shared),
                    doc: doc.index,
                    inner_describe,
                    holder: if self.inner_holder {
                        site.kind
                    } else if self.encoding == Encoding::Text && !reported {
                        // A ConfigMap holds it in the management cluster, whatever the inner
                        // kind: readable as widely as any ConfigMap there.
                        Holder::ConfigMap
                    } else {
                        site.kind
                    },
                    inner: Some(site.carrier.clone()),
                    inner_node,
                };
                let location = carrier.describe(None);
                let mut outer =
                    FoundConfig::holding(self.outer.clone(), location, site.text, carrier);
                // Secret either way when the outer object or the inner one is a Secret.
                outer.secret = secret || self.encoding == Encoding::Base64 || reported;
                outer.mutable = mutable;
                outer.note = note;
                outer.other_platforms = other_platforms;
                found.push(outer);
            }
        }
        if found.iter().filter(|s| s.mutable).count() > 1 {
            // One patch replaces the whole value: two edits of it would overwrite each other.
            for site in &mut found {
                site.mutable = false;
                site.note = Some(NOT_EDITABLE_NOTE.to_owned());
            }
        }
        found
    }
}

/// The string at `path` of an object's fields.
fn string_at<'a>(fields: &'a Value, path: &[Seg]) -> Option<&'a str> {
    path.iter()
        .try_fold(fields, |v, seg| match seg {
            Seg::Key(k) => v.get(k),
            Seg::Index(i) => v.get(i),
        })
        .and_then(Value::as_str)
}

/// Whether a value is one clusterctl / envsubst variable and nothing else: `${NAME}`.
fn is_substitution_variable(raw: &str) -> bool {
    let raw = raw.trim();
    raw.strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '=' | '-'))
        })
}

/// A cloud config in a ConfigMap or Secret embedded in a payload value of the outer object.
#[derive(Debug)]
pub(super) struct PayloadSite {
    /// How messages name the carrier (`ClusterResourceSet payload`).
    label: &'static str,
    /// Path of the payload value in the outer object.
    value_path: Vec<Seg>,
    /// `stringData["cloud-config-secret.yaml"]`.
    value_location: String,
    encoding: Encoding,
    /// The embedded manifests (decoded), shared by every site of the value: a payload of
    /// 1 MiB may hold thousands of sites, and a copy each would cost gigabytes.
    payload: Arc<str>,
    /// 0-based index of the inner object's document in the payload.
    doc: usize,
    /// `document 1 (Secret kube-system/cloud-config data["cloud.conf"])`.
    inner_describe: String,
    /// The inner object's carrier (None when the value could not be read).
    inner: Option<Arc<dyn Carrier>>,
    /// The node of the inner field holding the config (None when it cannot be edited).
    inner_node: Option<Node>,
    holder: Holder,
}

impl PayloadSite {
    /// The payload with the inner carrier's patch written in, verified; None when that
    /// cannot be done as minimal verified edits.
    fn edited_payload(&self, ops: &[PatchOperation]) -> Option<String> {
        let mut text = self.payload.to_string();
        for op in ops {
            let (path, value) = match op {
                PatchOperation::Replace(r) => (&r.path, &r.value),
                PatchOperation::Add(a) => (&a.path, &a.value),
                _ => return None,
            };
            let segs: Vec<Seg> = path
                .tokens()
                .map(|t| Seg::Key(t.decoded().into_owned()))
                .collect();
            text = yamledit::apply(
                &text,
                self.doc,
                &Change::Set {
                    path: segs,
                    value: value.clone(),
                },
            )
            .ok()?;
        }
        Some(text)
    }
}

impl Carrier for PayloadSite {
    /// The inner edit written into the embedded manifest, and the manifest into the outer
    /// value. Empty when the edit cannot be written as a verified minimal edit (such sites
    /// are made validate-only when found, so this is not expected to happen).
    fn patch(&self, edited: &Document, edits: &[IniEdit]) -> Vec<PatchOperation> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let Some(text) = self.edited_payload(&inner.patch(edited, edits)) else {
            return Vec::new();
        };
        let value = self.encoding.encode(text);
        vec![PatchOperation::Replace(ReplaceOperation {
            path: pointer(&self.value_path),
            value: Value::String(value),
        })]
    }

    /// A line of the embedded manifest: the line of the inner field (or of the config's line
    /// inside it, for a literal block) in the payload text. Base64 payloads have no lines.
    fn trace(&self, line: Option<usize>) -> Anchor {
        if self.encoding == Encoding::Base64 {
            return Anchor::Node(self.value_path.clone());
        }
        let Some(node) = &self.inner_node else {
            return Anchor::Node(self.value_path.clone());
        };
        let in_payload = match (self.inner.as_ref().map(|c| c.trace(line)), line) {
            (Some(Anchor::TextLine { .. }), Some(line)) => {
                yaml::line_within_scalar(&self.payload, node, line)
            }
            _ => yaml::line_within_scalar(&self.payload, node, 1),
        };
        Anchor::TextLine {
            path: self.value_path.clone(),
            line: in_payload,
        }
    }

    fn pointer(&self) -> String {
        pointer_text(&self.value_path)
    }

    fn describe(&self, line: Option<usize>) -> String {
        let mut out = format!("{} {}", self.label, self.value_location);
        if self.inner.is_some() {
            out.push(' ');
            out.push_str(&self.inner_describe);
        }
        if let Some(line) = line {
            out.push_str(&format!(" line {line}"));
        }
        out
    }

    /// The first line names the payload value; the document, the inner object and the line
    /// inside the payload are the part after it (`At …`), so that first line stays short.
    fn locate(&self, line: Option<usize>) -> Location {
        let mut within = self.label.to_owned();
        if self.inner.is_some() {
            within.push(' ');
            within.push_str(&self.inner_describe);
        }
        if let Some(line) = line {
            within.push_str(&format!(" line {line}"));
        }
        Location {
            at: self.value_location.clone(),
            field_line: None,
            within: Some(within),
        }
    }

    fn holder(&self) -> Holder {
        self.holder
    }

    fn path(&self) -> Option<Vec<Seg>> {
        Some(self.value_path.clone())
    }
}

#[cfg(test)]
mod tests {
    /// `unescape` as it was written before it copied runs (one `char` at a time): the
    /// reference the faster one must equal on every input.
    fn unescape_reference(text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(&(_, next)) = chars.peek() else {
                out.push(c);
                break;
            };
            let hex = |len: usize| {
                text.get(i + 2..i + 2 + len)
                    .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .and_then(char::from_u32)
            };
            let simple = match next {
                '0' => Some('\0'),
                'a' => Some('\u{7}'),
                'b' => Some('\u{8}'),
                't' | '\t' => Some('\t'),
                'n' => Some('\n'),
                'v' => Some('\u{b}'),
                'f' => Some('\u{c}'),
                'r' => Some('\r'),
                'e' => Some('\u{1b}'),
                ' ' => Some(' '),
                '"' => Some('"'),
                '/' => Some('/'),
                '\\' => Some('\\'),
                'N' => Some('\u{85}'),
                '_' => Some('\u{a0}'),
                'L' => Some('\u{2028}'),
                'P' => Some('\u{2029}'),
                _ => None,
            };
            if let Some(decoded) = simple {
                out.push(decoded);
                chars.next();
                continue;
            }
            let long = match next {
                'x' => hex(2).map(|c| (c, 2)),
                'u' => hex(4).map(|c| (c, 4)),
                'U' => hex(8).map(|c| (c, 8)),
                _ => None,
            };
            if let Some((decoded, len)) = long {
                out.push(decoded);
                chars.next();
                for _ in 0..len {
                    chars.next();
                }
                continue;
            }
            if next == '\n' || next == '\r' {
                // An escaped line break: the break and the next line's leading blanks go.
                chars.next();
                if next == '\r' && chars.peek().is_some_and(|&(_, c)| c == '\n') {
                    chars.next();
                }
                while chars.peek().is_some_and(|&(_, c)| c == ' ' || c == '\t') {
                    chars.next();
                }
                continue;
            }
            out.push(c);
        }
        out
    }

    /// The faster `unescape` equals the char-by-char reference on generated texts built from
    /// the characters that matter (every escape letter, hex digits, breaks, blanks,
    /// multi-byte characters, backslashes), including a backslash at the end.
    #[test]
    fn unescape_equals_the_char_by_char_reference() {
        let alphabet: Vec<char> = "\\\\\\\\xuU0abtnvfre \"/NLP_09aFfg\n\r\t é€😀kind"
            .chars()
            .collect();
        let mut next = crate::test_rng::lcg(0x5eed);
        for _ in 0..20_000 {
            let text = crate::test_rng::text_of(&mut next, &alphabet, 24);
            assert_eq!(unescape(&text), unescape_reference(&text), "{text:?}");
        }
        for text in [
            "\\",
            "a\\",
            "\\x4",
            "\\u00e9x",
            "\\U0001F600",
            "\\\r\n  x",
            "\\\r  y",
            "\\é",
        ] {
            assert_eq!(unescape(text), unescape_reference(text), "{text:?}");
        }
    }

    /// `worth_parsing` as it was before [`spellings`] skipped unescaping texts whose only
    /// escapes are `\n`, `\t`, `\r` and `\"`: every text with a backslash unescaped.
    fn worth_parsing_reference(text: &str, sites: &SitesDocument) -> bool {
        let charts = super::super::chart_names_of(sites);
        spellings(text, false, |text| {
            text.contains("kind")
                && (names_a_site(text, sites)
                    || names_a_ccm(text)
                    || charts.iter().any(|c| text.contains(c.as_str())))
        })
    }

    /// The payload prefilter with the plain-escape shortcut answers as the reference on
    /// generated texts: names whole, split by every kind of escape (plain ones, hex and
    /// Unicode escapes, escaped backslashes of JSON holding YAML, folded lines), and the
    /// shortcut is taken only when its names hold none of the plain escapes' characters.
    #[test]
    fn worth_parsing_equals_the_unescaping_reference() {
        let sites = sites();
        let pieces = [
            "kind",
            "\\x6bind",
            "k\\u0069nd",
            "\\\\x6bind",
            "ki",
            "nd",
            "cloud-config",
            "cloud\\u002dconfig",
            "cloud\\\\u002dconfig",
            "cloud-",
            "config",
            "stackgate.dev/cloud-config",
            "stackgate.dev\\/cloud-config",
            "openstack-cloud-controller-manager",
            "openstack-cloud-\\\n  controller-manager",
            "--cloud-provider=openstack",
            "\\n",
            "\\t",
            "\\r",
            "\\\"",
            "\\\\",
            "\\\\n",
            "\\",
            "\"",
            "\n",
            " ",
            "x",
            "é",
        ];
        let mut next = crate::test_rng::lcg(0x0dd5);
        let mut found = 0;
        for _ in 0..30_000 {
            let text = crate::test_rng::text_of(&mut next, &pieces, 8);
            let expected = worth_parsing_reference(&text, &sites);
            assert_eq!(worth_parsing(&text, &sites), expected, "{text:?}");
            found += usize::from(expected);
        }
        // The generated texts reach both answers, through escapes too.
        assert!(found > 1_000, "{found}");
        assert!(worth_parsing("\\x6bind: \\\"cloud-config\\\"", &sites));
        assert!(!worth_parsing("kind: \\\"cloud-\\nconfig\\\"", &sites));

        // A name holding a plain escape's character: the shortcut is not taken.
        let mut quoted = sites.clone();
        quoted.sites[0].name = "say\"cheese".to_owned();
        let text = "kind: say\\\"cheese";
        assert!(worth_parsing_reference(text, &quoted));
        assert!(worth_parsing(text, &quoted));
        assert!(!worth_parsing(text, &sites));
    }

    use super::*;
    use crate::secret_text::SecretText;
    use base64::Engine as _;
    use serde_json::json;

    fn sites() -> SitesDocument {
        serde_saphyr::from_str(include_str!("../../policies/cloud-config-sites.yaml"))
            .expect("the default sites document parses")
    }

    fn crs_secret(payload: &str) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "crs", "namespace": "default"},
            "type": RESOURCE_SET_SECRET_TYPE,
            "stringData": {"p.yaml": payload}}))
        .unwrap()
    }

    const INNER: &str = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                         namespace: kube-system\nstringData:\n  cloud.conf: |\n    [Global]\n    \
                         region = RegionOne\n";

    #[test]
    fn embedded_site_is_found_and_described() {
        let found = find(SiteKind::Secret, &crs_secret(INNER), &sites());
        assert_eq!(found.len(), 1);
        let site = &found[0];
        assert_eq!(
            site.text.as_ref().map(SecretText::expose),
            Ok("[Global]\nregion = RegionOne\n")
        );
        assert!(site.mutable && site.secret);
        assert_eq!(
            site.describe(Some(2)),
            "Secret default/crs ClusterResourceSet payload stringData[\"p.yaml\"] document 1 \
             (Secret kube-system/cloud-config stringData[\"cloud.conf\"]) line 2"
        );
        assert_eq!(site.pointer(), "/stringData/p.yaml");
        // Line 2 of the config is line 9 of the payload text.
        assert_eq!(
            site.trace(Some(2)),
            Anchor::TextLine {
                path: vec![Seg::key("stringData"), Seg::key("p.yaml")],
                line: 9
            }
        );
    }

    /// A value is read only when it spells `kind`; as written or through an escape of a
    /// double-quoted key, the embedded site is found the same, and a value that spells no
    /// `kind` (a cloud config, a chart's name alone) holds nothing.
    #[test]
    fn only_a_value_that_spells_kind_is_read() {
        assert!(spells_kind("apiVersion: v1\nkind: Secret\n"));
        assert!(spells_kind("\"\\x6bind\": Secret"));
        assert!(spells_kind("\"k\\\n   ind\": Secret"));
        assert!(spells_kind("{\"p\": \"\\\"\\\\u006bind\\\": Secret\"}"));
        assert!(!spells_kind("[Global]\nregion = RegionOne\n"));
        assert!(!spells_kind("\"\\x6aind\": Secret"));

        let plain = find(SiteKind::Secret, &crs_secret(INNER), &sites());
        for spelled in [
            INNER.replace("kind: Secret", "\"\\x6bind\": Secret"),
            INNER.replace("kind: Secret", "\"\\u006Bind\": Secret"),
        ] {
            let found = find(SiteKind::Secret, &crs_secret(&spelled), &sites());
            assert_eq!(found.len(), 1, "{spelled}");
            assert_eq!(found[0].describe(Some(2)), plain[0].describe(Some(2)));
            assert_eq!(
                found[0].text.as_ref().map(SecretText::expose),
                plain[0].text.as_ref().map(SecretText::expose)
            );
        }
        // The chart's name without a `kind`: no values carrier to read.
        let unkinded = "chart: openstack-cloud-controller-manager\nvalues:\n  cloudConfig: {}\n";
        assert!(find(SiteKind::Secret, &crs_secret(unkinded), &sites()).is_empty());
        // With one, the HelmChart carries the chart's values: a site.
        let kinded = "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: occm\n  \
             namespace: kube-system\nspec:\n  chart: openstack-cloud-controller-manager\n  \
             valuesContent: |\n    cloudConfig:\n      global:\n        region: R\n";
        assert_eq!(
            find(SiteKind::Secret, &crs_secret(kinded), &sites()).len(),
            1
        );
    }

    #[test]
    fn other_secret_types_and_unrelated_configmaps_are_not_payloads() {
        let mut secret = crs_secret(INNER);
        secret.data["type"] = json!("Opaque");
        assert!(find(SiteKind::Secret, &secret, &sites()).is_empty());
        // A ConfigMap whose value is not manifests, even one mentioning a site's name, is
        // not a payload and gets no finding.
        let cm: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1",
            "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "a"},
            "data": {"notes": "kind: [cloud-config", "ini": "[Global]\n"}}))
        .unwrap();
        assert!(find(SiteKind::ConfigMap, &cm, &sites()).is_empty());
    }

    #[test]
    fn a_payload_that_is_not_yaml_is_reported_for_a_crs_secret() {
        let found = find(
            SiteKind::Secret,
            &crs_secret("kind: Secret\nname: cloud-config\n  bad: [\n"),
            &sites(),
        );
        assert_eq!(found.len(), 1);
        assert!(!found[0].mutable);
        let error = found[0].text.clone().unwrap_err().to_string();
        assert!(error.contains("is not valid YAML"), "{error}");
        assert!(!error.contains("bad"), "{error}");
    }

    #[test]
    fn two_configs_in_one_value_or_an_alias_are_validate_only() {
        let two = format!("{INNER}---\n{INNER}");
        let found = find(SiteKind::Secret, &crs_secret(&two), &sites());
        assert_eq!(found.len(), 2);
        assert!(found.iter().all(|s| !s.mutable && s.note.is_some()));
        let aliased = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                       namespace: kube-system\n  annotations: {a: &conf \"[Global]\\n\"}\n\
                       stringData:\n  cloud.conf: *conf\n";
        let found = find(SiteKind::Secret, &crs_secret(aliased), &sites());
        assert_eq!(found.len(), 1);
        assert!(!found[0].mutable);
        assert!(found[0].note.as_deref().unwrap_or("").contains("alias"));
    }

    #[test]
    fn the_patch_edits_one_line_of_the_payload_and_reencodes_data() {
        let encoded = base64::engine::general_purpose::STANDARD.encode(INNER);
        let secret: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1",
            "kind": "Secret", "metadata": {"name": "crs", "namespace": "default"},
            "type": RESOURCE_SET_SECRET_TYPE, "data": {"p.yaml": encoded}}))
        .unwrap();
        let found = find(SiteKind::Secret, &secret, &sites());
        let mut doc =
            Document::parse(found[0].text.as_ref().map(SecretText::expose).unwrap()).unwrap();
        doc.set("LoadBalancer", "provider-requires-serial-api-calls", "true");
        let patch = serde_json::to_value(found[0].patch(&doc, &[])).unwrap();
        assert_eq!(patch[0]["path"], "/data/p.yaml");
        let text = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(patch[0]["value"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            text,
            format!("{INNER}\n    [LoadBalancer]\n    provider-requires-serial-api-calls = true\n")
        );
    }

    const CCM_DS: &str = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ccm\n---\n\
                          apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  \
                          name: openstack-cloud-controller-manager\n  namespace: kube-system\n\
                          spec:\n  template:\n    spec:\n      containers:\n      - name: occm\n        \
                          args:\n        - --v=1\n        - --cloud-provider=openstack\n";

    #[test]
    fn embedded_ccm_objects_are_found_once_per_document_with_their_lines() {
        let (found, objects) = scan(
            SiteKind::Secret,
            &crs_secret(CCM_DS),
            &sites(),
            true,
            &Cancel::never(),
        );
        assert!(found.is_empty());
        // The ServiceAccount document holds no CCM marker: only the DaemonSet is handed on.
        assert_eq!(objects.len(), 1);
        let ds = &objects[0];
        assert_eq!(ds.gvk, GroupVersionKind::gvk("apps", "v1", "DaemonSet"));
        assert_eq!(ds.doc, 1);
        assert_eq!(ds.pointer(), "/stringData/p.yaml");
        assert_eq!(
            ds.reference(),
            "DaemonSet kube-system/openstack-cloud-controller-manager"
        );
        // Lines of the payload text: the document, a container, an argument.
        assert_eq!(ds.line(None), 6);
        assert_eq!(ds.line(Some("/spec/template/spec/containers/0")), 15);
        assert_eq!(ds.line(Some("/spec/template/spec/containers/0/args/1")), 18);
        assert_eq!(ds.line(Some("/spec/nothing/here")), 11);
        assert_eq!(
            ds.trace(17),
            Anchor::TextLine {
                path: vec![Seg::key("stringData"), Seg::key("p.yaml")],
                line: 17
            }
        );
        assert_eq!(
            ds.describe(17, false),
            "ClusterResourceSet payload stringData[\"p.yaml\"] document 2 (DaemonSet \
             kube-system/openstack-cloud-controller-manager) line 17"
        );
        // Not asked for: not built.
        assert!(
            scan(
                SiteKind::Secret,
                &crs_secret(CCM_DS),
                &sites(),
                false,
                &Cancel::never()
            )
            .1
            .is_empty()
        );
    }

    #[test]
    fn embedded_objects_in_base64_and_configmaps_and_what_is_not_read() {
        let encoded = base64::engine::general_purpose::STANDARD.encode(CCM_DS);
        let secret: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1",
            "kind": "Secret", "metadata": {"name": "crs", "namespace": "default"},
            "type": RESOURCE_SET_SECRET_TYPE, "data": {"p.yaml": encoded}}))
        .unwrap();
        let objects = scan(SiteKind::Secret, &secret, &sites(), true, &Cancel::never()).1;
        assert_eq!(objects.len(), 1);
        // A base64 value has no lines in the object: the field.
        assert_eq!(
            objects[0].trace(17),
            Anchor::Node(vec![Seg::key("data"), Seg::key("p.yaml")])
        );
        let configmap = |value: &str| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "crs", "namespace": "default"},
                "data": {"p.yaml": value}}))
            .unwrap()
        };
        assert_eq!(
            scan(
                SiteKind::ConfigMap,
                &configmap(CCM_DS),
                &sites(),
                true,
                &Cancel::never()
            )
            .1
            .len(),
            1
        );
        // Not YAML, or no marker: nothing (and no finding about it).
        let (found, objects) = scan(
            SiteKind::ConfigMap,
            &configmap("kind: [openstack-cloud-controller-manager"),
            &sites(),
            true,
            &Cancel::never(),
        );
        assert!(found.is_empty() && objects.is_empty());
        let calico = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: calico-node\n";
        assert!(!worth_parsing(calico, &sites()));
        // A Secret of another type is not a payload.
        let mut opaque = crs_secret(CCM_DS);
        opaque.data["type"] = json!("Opaque");
        assert!(
            scan(SiteKind::Secret, &opaque, &sites(), true, &Cancel::never())
                .1
                .is_empty()
        );
        // Over the size cap: not parsed.
        let big = format!("{CCM_DS}#{}\n", "x".repeat(MAX_PAYLOAD_TEXT_BYTES));
        assert!(
            scan(
                SiteKind::Secret,
                &crs_secret(&big),
                &sites(),
                true,
                &Cancel::never()
            )
            .1
            .is_empty()
        );
    }

    #[test]
    fn escapes_are_read_by_the_prefilter() {
        assert_eq!(
            unescape("\\x6bind \\u002d \\U0001F600 \\/ \\q"),
            "kind - \u{1F600} / \\q"
        );
        assert_eq!(unescape("\"cloud-\\\n    config\""), "\"cloud-config\"");
        // Invalid or cut-short escapes are kept as written.
        assert_eq!(unescape("\\xZZ \\u12"), "\\xZZ \\u12");
        assert_eq!(unescape("end\\"), "end\\");
        let sites = sites();
        assert!(may_hold_site(
            "\"\\x6bind\": Secret\nname: cloud-config",
            &sites
        ));
        // JSON holding YAML: escapes read twice.
        assert!(may_hold_site(
            "{\"p\": \"\\\"\\\\x6bind\\\": Secret\\nname: cloud-config\"}",
            &sites
        ));
        assert!(may_hold_ccm(
            "kind: DaemonSet\nimage: \"openstack-cloud\\u002dcontroller-manager\""
        ));
        assert!(!may_hold_site("\"\\x6bind\": Secret\nname: other", &sites));
    }

    #[test]
    fn substitution_variables_are_recognised() {
        assert!(is_substitution_variable(
            "${OPENSTACK_CLOUD_PROVIDER_CONF_B64}"
        ));
        assert!(!is_substitution_variable("${A} ${B}"));
        assert!(!is_substitution_variable("not base64"));
    }
}
