//! Rule families. A rule reads one cloud config (already found and decoded by a site) and
//! reports violations and the edits it wants. Rules know nothing about carriers, modes,
//! exemptions or the wire format; the engine applies those.

pub mod concurrency;
pub mod credentials;
pub mod docs;
pub mod integrity;
pub mod known_bad;
pub mod lb_guard;
pub mod release_annotations;
pub mod serial;

use crate::cloudconf::{Document, ParseError};
use crate::sites::SiteError;

/// A cloud config as a rule sees it.
#[derive(Debug)]
pub struct ConfigView<'a> {
    /// Parsed document, or why it could not be read or parsed.
    pub doc: Result<&'a Document, Unreadable<'a>>,
    /// Whether the carrier is a Secret (values are never echoed in either case; this lets a
    /// rule word its message).
    pub secret: bool,
    /// Whether the carrier is a ConfigMap.
    pub configmap: bool,
}

/// Why a cloud config could not be read.
#[derive(Debug, Clone, Copy)]
pub enum Unreadable<'a> {
    /// The carrier could not be decoded (base64, UTF-8).
    Site(&'a SiteError),
    /// The INI text is not valid gcfg.
    Parse(&'a ParseError),
}

impl Unreadable<'_> {
    /// Line of the problem, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            Unreadable::Site(_) => None,
            Unreadable::Parse(e) => Some(e.line),
        }
    }
}

impl std::fmt::Display for Unreadable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unreadable::Site(e) => write!(f, "{e}"),
            Unreadable::Parse(e) => write!(f, "gcfg syntax error at {e}"),
        }
    }
}

/// How serious a violation is before the policy mode is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Deny in `enforce` mode.
    Deny,
    /// Always only a warning.
    Warn,
}

/// One thing a rule objects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Deny or warn.
    pub severity: Severity,
    /// 1-based line in the INI text, when there is one.
    pub line: Option<usize>,
    /// What is wrong and why (never a value from the config), and how to fix it.
    pub message: String,
    /// Whether the rule's own edit fixes it (then it is not reported where the edit applies).
    pub fixed_by_edit: bool,
}

/// An edit a rule wants: set `key = value` in the plain section `section`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniEdit {
    /// Section name, e.g. `LoadBalancer`.
    pub section: &'static str,
    /// Key name.
    pub key: &'static str,
    /// Literal value (never secret).
    pub value: &'static str,
}

/// What a rule returns for one cloud config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleOutput {
    /// Violations found.
    pub violations: Vec<Violation>,
    /// Edits wanted (applied only where the site is mutable and the mode allows).
    pub edits: Vec<IniEdit>,
}

/// A violation found by an object-level rule (one that reads the whole object rather than
/// a cloud config): the message already names the object and field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectViolation {
    /// Deny or warn.
    pub severity: Severity,
    /// JSON pointer to the offending field, when there is one.
    pub pointer: Option<String>,
    /// What, where, why and how to fix (never a secret value).
    pub message: String,
    /// Whether the rule's own patch fixes it.
    pub fixed_by_edit: bool,
}

/// A description of one change an object-level rule's patch makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MutationNote {
    /// JSON pointer of the changed field.
    pub pointer: Option<String>,
    /// What changed, for humans.
    pub message: String,
}

/// What an object-level rule returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectOutput {
    /// Violations found.
    pub violations: Vec<ObjectViolation>,
    /// JSON Patch operations to apply (only in enforce and warn modes).
    pub patch: Vec<json_patch::PatchOperation>,
    /// One note per change the patch makes.
    pub mutations: Vec<MutationNote>,
}

/// Runs a config rule on INI text, for the rule modules' unit tests.
#[cfg(test)]
pub(crate) fn run_on_text(
    check: fn(&ConfigView<'_>) -> RuleOutput,
    text: &str,
    configmap: bool,
) -> RuleOutput {
    let doc = Document::parse(text).expect("test input parses");
    check(&ConfigView {
        doc: Ok(&doc),
        secret: !configmap,
        configmap,
    })
}
