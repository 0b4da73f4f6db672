//! Rule families. A family is one module here with one [`Family`] value, listed in
//! [`FAMILIES`]: its id, what it reads (each cloud config a site finds, the whole object, or
//! the object of a DELETE), its typed parameters, its check function, its codes and its
//! documentation example. A check reports [`Violation`]s and the edits it wants; it knows
//! nothing about carriers, modes, exemptions or the wire format, which the engine applies.
//!
//! Adding a family: `ARCHITECTURE.md`, "How to add a rule family".

pub mod ccm_config_source;
pub use crate::facts::ccm_workload;
pub mod cluster_name;
pub mod concurrency;
pub mod credentials;
mod family;
pub mod integrity;
pub mod known_bad;
pub mod lb_guard;
pub mod ovn_source_ranges;
pub mod release_annotations;
pub mod serial;
mod subject;

pub(crate) use family::yaml_error_message;
pub use family::{
    Check, Context, Example, Facts, Family, NoParams, ObjectInput, Params, ParamsInput, Platform,
    RuleId, parse_params,
};

/// Every rule family, in evaluation order: the cloud-config families run per site in this
/// order (integrity first, so an unreadable config is reported once, by it), then the object
/// families per policy in policy order. The default policy set is embedded in this order.
pub static FAMILIES: &[&Family] = &[
    &integrity::FAMILY,
    &serial::FAMILY,
    &known_bad::FAMILY,
    &credentials::FAMILY,
    &concurrency::FAMILY,
    &ccm_config_source::FAMILY,
    &cluster_name::FAMILY,
    &ovn_source_ranges::FAMILY,
    &release_annotations::FAMILY,
    &lb_guard::FAMILY,
];
pub use subject::{ObjectRef, Operation, Requester, Subject, bound_names};

pub use crate::cloudconf::IniEdit;
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
    /// The config is rendered from one values source of a release that may have others (a
    /// labelled values ConfigMap or Secret): a setting missing here may be set by another
    /// source, so a rule says the setting is missing from these values, never what the CCM
    /// then runs.
    pub values_source: bool,
    /// The CCM release the holding object deploys, when it pins one (a CCM chart's version
    /// or its values' `image.tag`); None for ConfigMaps, Secrets and unpinned charts.
    pub ccm_version: Option<&'a crate::sites::helm::CcmVersion>,
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
    /// True when the text was refused by one of stackgate's own caps on untrusted input (a
    /// YAML node, alias-expansion or depth cap), not because Helm or the CCM would refuse it:
    /// messages must then not claim the CCM would fail to start.
    pub fn is_stackgate_limit(&self) -> bool {
        matches!(self, Unreadable::Site(SiteError::Yaml { error, .. }) if error.limit.is_some())
    }

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
    /// What kind of finding it is: one of the family's [`Family::codes`]. Metrics and reports
    /// read this, never the message.
    pub code: &'static str,
    /// 1-based line in the INI text, for a cloud-config family.
    pub line: Option<usize>,
    /// JSON pointer to the offending field, for an object family (None: the whole object).
    pub pointer: Option<String>,
    /// Where, for an object family: the object and field as a user finds them
    /// (`Deployment kube-system/occm container "occm" args[1]`). None for a cloud-config
    /// family, whose findings the engine locates in the site (object, field, INI line).
    pub location: Option<String>,
    /// What is wrong: one short clause, no final period, never a value of a Secret. The first
    /// line of every face is `<location>: <what>. Fix: <fix>`, at most ~200 characters.
    pub what: String,
    /// The action that fixes it: one short clause, no final period.
    pub fix: String,
    /// Why it matters, with the upstream reference the rule relies on; may be long (shown
    /// after the first line, in denials, reports and `stackgate explain`).
    pub why: String,
    /// A caveat that holds only while the object is judged alone: what an overlay a
    /// controller merges over it, which this write does not show, may set instead (a RKE2/k3s
    /// HelmChartConfig over its HelmChart). A sentence, shown before the notes; a face that
    /// merged the overlay in and judged the merge leaves it out (the engine's
    /// `Text::merged_overlay`).
    pub unseen_overlay: Option<String>,
    /// Further caveats, each a sentence.
    pub notes: Vec<String>,
    /// Whether the rule's own edit fixes it (then it is not reported where the edit applies).
    pub fixed_by_edit: bool,
}

impl Violation {
    /// Every part on one line, for tests that look for a phrase wherever it is.
    #[cfg(test)]
    pub(crate) fn message(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        parts.extend(self.location.as_deref());
        parts.extend([self.what.as_str(), self.fix.as_str(), self.why.as_str()]);
        parts.extend(self.unseen_overlay.as_deref());
        parts.extend(self.notes.iter().map(String::as_str));
        parts.join(" ")
    }
}

/// At most this many findings of one kind (one rule, one cloud config) are reported one by
/// one; the rest are folded into a single "and N more" finding that lists their first lines.
///
/// So a config family reports a bounded number of findings however many lines are bad (a
/// 200 000-line config of unknown keys gives 11 warnings, not 200 000): each family has at most
/// a handful of kinds, e.g. `cloud-config-integrity` has four (unreadable, fatal values,
/// ignored names, values cut at a comment), so at most `4 * (MAX_FINDINGS_PER_KIND + 1)`.
pub const MAX_FINDINGS_PER_KIND: usize = 10;

/// How many line numbers the "and N more" finding lists.
const FOLDED_LINES_LISTED: usize = 10;

/// Collects the findings of one kind and folds those past [`MAX_FINDINGS_PER_KIND`].
///
/// Callers ask [`KindCollector::wants_detail`] before building a message, so the work per
/// folded finding is a counter and at most one line number.
#[derive(Debug)]
pub(crate) struct KindCollector {
    code: &'static str,
    kept: Vec<Violation>,
    folded: usize,
    folded_lines: Vec<usize>,
    folded_severity: Option<Severity>,
}

impl KindCollector {
    /// A collector for findings of `code`.
    pub(crate) fn new(code: &'static str) -> Self {
        KindCollector {
            code,
            kept: Vec::new(),
            folded: 0,
            folded_lines: Vec::new(),
            folded_severity: None,
        }
    }

    /// True while findings are still reported one by one (build the message then).
    pub(crate) fn wants_detail(&self) -> bool {
        self.kept.len() < MAX_FINDINGS_PER_KIND
    }

    /// Records one finding: kept while [`Self::wants_detail`], else counted.
    pub(crate) fn push(&mut self, v: Violation) {
        if self.wants_detail() {
            self.kept.push(v);
        } else {
            self.fold(v.severity, v.line);
        }
    }

    /// Counts a finding that is not reported one by one.
    pub(crate) fn fold(&mut self, severity: Severity, line: Option<usize>) {
        self.folded += 1;
        if let Some(line) = line
            && self.folded_lines.len() < FOLDED_LINES_LISTED
        {
            self.folded_lines.push(line);
        }
        self.folded_severity = match (self.folded_severity, severity) {
            (Some(Severity::Deny), _) | (_, Severity::Deny) => Some(Severity::Deny),
            _ => Some(Severity::Warn),
        };
    }

    /// Appends the kept findings, then one finding for the folded ones, if any. `what` names
    /// the kind in the plural ("unknown keys or sections").
    pub(crate) fn finish(self, out: &mut Vec<Violation>, what: &str) {
        out.extend(self.kept);
        let Some(severity) = self.folded_severity else {
            return;
        };
        let listed: Vec<String> = self.folded_lines.iter().map(|l| l.to_string()).collect();
        let more = if self.folded > listed.len() {
            ", …"
        } else {
            ""
        };
        let lines = if listed.is_empty() {
            String::new()
        } else {
            format!(" (lines {}{more})", listed.join(", "))
        };
        out.push(Violation {
            severity,
            code: self.code,
            line: self.folded_lines.first().copied(),
            pointer: None,
            location: None,
            what: format!("and {} more {what}{lines}", self.folded),
            fix: "fix them as the findings above".to_owned(),
            why: format!(
                "The same finding as above, not listed one by one (at most \
                 {MAX_FINDINGS_PER_KIND} of one kind are)."
            ),
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
}

/// A description of one change an object family's patch makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MutationNote {
    /// JSON pointer of the changed field.
    pub pointer: Option<String>,
    /// What changed, for humans.
    pub message: String,
}

/// What a family's check returns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleOutput {
    /// Violations found.
    pub violations: Vec<Violation>,
    /// Cloud-config families: edits wanted (applied only where the site is mutable and the
    /// mode allows).
    pub edits: Vec<IniEdit>,
    /// Object families: JSON Patch operations to apply (only in enforce and warn modes).
    pub patch: Vec<json_patch::PatchOperation>,
    /// Object families: one note per change the patch makes.
    pub mutations: Vec<MutationNote>,
}

impl RuleOutput {
    /// True when the check found nothing and wants no change.
    pub fn is_empty(&self) -> bool {
        self.violations.is_empty() && self.edits.is_empty() && self.patch.is_empty()
    }
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
        values_source: false,
        ccm_version: None,
    })
}
