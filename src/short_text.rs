//! Untrusted text bounded by type: a [`ShortText`] can only be made by cutting a string at a
//! fixed length, so a name, namespace, key or location taken from a request is bounded once,
//! where it enters, and every message, log field, metric label and report row built from it is
//! bounded too — whatever the request held (the apiserver calls mutating webhooks before it
//! validates names, so a review can carry a name of megabytes).
//!
//! The limits are Kubernetes' own, so a cut only ever happens to text the apiserver refuses
//! to store: every real object's name and namespace fits whole.

use std::fmt;

/// Longest name or namespace: a DNS subdomain (RFC 1123), which is what the apiserver
/// validates object names against (`IsDNS1123Subdomain`, `DNS1123SubdomainMaxLength = 253`
/// in k8s.io/apimachinery pkg/util/validation/validation.go); namespaces are DNS labels
/// (63), so 253 bounds both.
pub const NAME_MAX_BYTES: usize = 253;

/// Longest label value (`LabelValueMaxLength = 63`, k8s.io/apimachinery
/// pkg/util/validation/validation.go).
pub const LABEL_VALUE_MAX_BYTES: usize = 63;

/// Longest label or annotation key: a qualified name, a DNS-subdomain prefix (253), `/` and a
/// name part of at most 63 (`IsQualifiedName`, `qualifiedNameMaxLength = 63`, same file);
/// ConfigMap and Secret data keys are at most 253 (`IsConfigMapKey`), so this bounds them too.
pub const KEY_MAX_BYTES: usize = NAME_MAX_BYTES + 1 + LABEL_VALUE_MAX_BYTES;

/// Longest location of a finding (`Kind namespace/name <field> line N (…)`): a kind, a
/// namespace and a name at their limits, two keys and room for the words around them. A
/// location is built from parts already bounded here or by the input's caps; this is the
/// last bound, on the whole.
pub const LOCATION_MAX_BYTES: usize = 2048;

/// Text of at most a fixed number of bytes, made only by [`ShortText::cut`] (or its named
/// limits): text over the limit keeps its head, cut at a character boundary, and ends with
/// `…(N bytes)`, N the original length, so the cut is visible and never mistaken for the
/// whole.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShortText {
    text: String,
    cut: bool,
}

impl ShortText {
    /// `text` whole when it is at most `limit` bytes, else its head and the marker
    /// `…(N bytes)`, together at most `limit` bytes (the marker alone when `limit` is smaller
    /// than it: the length is what matters then).
    pub fn cut(text: &str, limit: usize) -> Self {
        if text.len() <= limit {
            return ShortText {
                text: text.to_owned(),
                cut: false,
            };
        }
        let marker = format!("…({} bytes)", text.len());
        let mut end = limit.saturating_sub(marker.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let mut out = String::with_capacity(end + marker.len());
        out.push_str(&text[..end]);
        out.push_str(&marker);
        ShortText {
            text: out,
            cut: true,
        }
    }

    /// A name or namespace, cut at [`NAME_MAX_BYTES`].
    pub fn name(text: &str) -> Self {
        Self::cut(text, NAME_MAX_BYTES)
    }

    /// A label value, cut at [`LABEL_VALUE_MAX_BYTES`].
    pub fn label_value(text: &str) -> Self {
        Self::cut(text, LABEL_VALUE_MAX_BYTES)
    }

    /// A label, annotation or data key, cut at [`KEY_MAX_BYTES`].
    pub fn key(text: &str) -> Self {
        Self::cut(text, KEY_MAX_BYTES)
    }

    /// A finding's location, cut at [`LOCATION_MAX_BYTES`].
    pub fn location(text: &str) -> Self {
        Self::cut(text, LOCATION_MAX_BYTES)
    }

    /// The text (with its marker, when it was cut).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it was cut: it no longer equals what the input said.
    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// The text as an owned string (for types that hold a `String`, such as kube's).
    pub fn into_string(self) -> String {
        self.text
    }
}

impl fmt::Display for ShortText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl AsRef<str> for ShortText {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl PartialEq<str> for ShortText {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for ShortText {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_within_the_limit_is_kept_whole() {
        assert_eq!(ShortText::name("cloud-config"), "cloud-config");
        let exact = "a".repeat(NAME_MAX_BYTES);
        assert_eq!(ShortText::name(&exact).as_str(), exact);
        assert!(!ShortText::name(&exact).is_cut());
        assert_eq!(ShortText::name(""), "");
    }

    #[test]
    fn longer_text_keeps_its_head_and_says_how_long_it_was() {
        let long = "n".repeat(1 << 20);
        let cut = ShortText::name(&long);
        assert_eq!(cut.as_str().len(), NAME_MAX_BYTES);
        assert!(cut.as_str().ends_with("…(1048576 bytes)"), "{cut}");
        assert!(cut.as_str().starts_with("nnnn"));
        assert!(cut.is_cut());
        let one_over = "a".repeat(NAME_MAX_BYTES + 1);
        let cut = ShortText::name(&one_over);
        assert!(cut.as_str().len() <= NAME_MAX_BYTES);
        assert!(cut.as_str().ends_with("…(254 bytes)"), "{cut}");
    }

    #[test]
    fn cuts_at_a_character_boundary_never_over_the_limit() {
        // Multi-byte characters of every width, at every offset against the limit.
        for prefix in 0..4 {
            for ch in ['é', '€', '𝄞', 'x'] {
                let text = format!("{}{}", "a".repeat(prefix), ch.to_string().repeat(200));
                for limit in [
                    0,
                    1,
                    5,
                    17,
                    30,
                    40,
                    LABEL_VALUE_MAX_BYTES,
                    100,
                    NAME_MAX_BYTES,
                ] {
                    let cut = ShortText::cut(&text, limit);
                    let expected_marker = format!("…({} bytes)", text.len());
                    if text.len() <= limit {
                        assert_eq!(cut.as_str(), text);
                        continue;
                    }
                    assert!(cut.as_str().ends_with(&expected_marker));
                    assert!(
                        cut.as_str().len() <= limit.max(expected_marker.len()),
                        "{limit}: {} bytes",
                        cut.as_str().len()
                    );
                    let head = &cut.as_str()[..cut.as_str().len() - expected_marker.len()];
                    assert!(text.starts_with(head), "the head is the text's own");
                    // The head is as long as the limit allows, to within one character.
                    let room = limit.saturating_sub(expected_marker.len());
                    assert!(
                        head.len() + ch.len_utf8() > room,
                        "{limit}: head {}",
                        head.len()
                    );
                }
            }
        }
    }

    #[test]
    fn named_limits_are_kubernetes_own() {
        assert_eq!(ShortText::label_value(&"v".repeat(64)).as_str().len(), 63);
        assert_eq!(
            ShortText::label_value(&"v".repeat(63)).as_str(),
            "v".repeat(63)
        );
        assert_eq!(KEY_MAX_BYTES, 317);
        assert_eq!(ShortText::key(&"k".repeat(317)).as_str().len(), 317);
        assert_eq!(ShortText::key(&"k".repeat(4000)).as_str().len(), 317);
        assert_eq!(
            ShortText::location(&"l".repeat(1 << 20)).as_str().len(),
            LOCATION_MAX_BYTES
        );
    }

    #[test]
    fn displays_and_converts_as_its_text() {
        let t = ShortText::name("crs");
        assert_eq!(t.to_string(), "crs");
        assert_eq!(t.as_ref(), "crs");
        assert!(!t.is_empty());
        assert_eq!(t.into_string(), "crs");
        assert!(ShortText::default().is_empty());
    }
}
