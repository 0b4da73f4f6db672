//! Text read from a Secret, as a type that cannot be rendered.
//!
//! [`SecretText`] has no `Display` and no `Serialize`, and its `Debug` prints only its length:
//! `format!("{}")`, a `tracing` field with `%`, or a JSON report of it does not compile, and
//! `{:?}` shows `SecretText(12 bytes)`. The code that must read the text (a YAML parser, a
//! comparison) calls [`SecretText::expose`] by name, so every read is visible in review.
//! What a message shows in place of such a value is [`not_shown`].

use std::fmt;

/// Text read from a Secret (`data`, `stringData`, a values key a HelmRelease reads from a
/// Secret, a clouds.yaml credential) or any cloud config (whatever holds it, a cloud config
/// may carry `[Global] password`). Compared, parsed or masked; never printed.
///
/// Its `Debug` shows the length only:
///
/// ```
/// let text = stackgate::secret_text::SecretText::new("hunter2".to_owned());
/// assert_eq!(format!("{text:?}"), "SecretText(7 bytes)");
/// ```
///
/// It cannot be formatted for display:
///
/// ```compile_fail
/// let text = stackgate::secret_text::SecretText::new("hunter2".to_owned());
/// let _ = format!("{text}");
/// ```
///
/// nor serialized:
///
/// ```compile_fail
/// let text = stackgate::secret_text::SecretText::new("hunter2".to_owned());
/// let _ = serde_json::to_string(&text);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SecretText(String);

impl SecretText {
    /// Wraps text read from a Secret.
    pub fn new(text: String) -> Self {
        Self(text)
    }

    /// The text, for the code that parses or compares it (never for a message).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Its length in bytes (what `Debug` shows).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretText({} bytes)", self.0.len())
    }
}

/// What a message shows in place of a value read from the Secret `secret` (`ns/name`, or
/// `name` when the namespace is left to the deployment).
pub fn not_shown(secret: &str) -> String {
    format!("<from Secret {secret}, not shown>")
}

/// Whether `text` ends with a [`not_shown`] marker (a value that stands for a Secret's).
pub fn ends_not_shown(text: &str) -> bool {
    text.ends_with(", not shown>") && text.contains("<from Secret ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_length_only() {
        let text = SecretText::new("hunter2-canary".to_owned());
        assert_eq!(format!("{text:?}"), "SecretText(14 bytes)");
        assert_eq!(text.expose(), "hunter2-canary");
        assert_eq!(text.len(), 14);
        assert!(!text.is_empty());
        assert!(SecretText::new(String::new()).is_empty());
        assert_eq!(text, SecretText::new("hunter2-canary".to_owned()));
    }

    #[test]
    fn the_marker_names_the_secret_and_is_recognised() {
        let marker = not_shown("kube-system/occm-values");
        assert_eq!(marker, "<from Secret kube-system/occm-values, not shown>");
        assert!(ends_not_shown(&format!("v1.31.0 {marker}")));
        assert!(!ends_not_shown("v1.31.0"));
        assert!(!ends_not_shown("<from ConfigMap a, not shown>"));
    }
}
