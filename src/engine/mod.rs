//! The engine: a loop over the rule families of [`crate::rules::FAMILIES`] and the one
//! function that applies policy modes and exemptions to what they found.
//!
//! Invariant: evaluation is pure. Its inputs are the [`Subject`] (what is written), the facts
//! an adapter gathered for it, the policy set and the release-catalog snapshot; it does no IO,
//! reads no clock and touches no globals. The same input gives the same verdict, which is what
//! lets the webhook, `stackgate check` and the documentation agree.

pub mod docs;
mod view;

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use json_patch::PatchOperation;
use kube::core::DynamicObject;

use crate::budget::{Cancel, Exhausted};
use crate::cloudconf::{Document, IniEdit};
use crate::policy::exception::{ExceptionState, ExceptionsAt, Target as ExceptionTarget};
use crate::policy::{Mode, Policy, PolicySet};
use crate::releases::Snapshot;
use crate::rules::{
    Check, ConfigView, Context, FAMILIES, ObjectInput, RuleOutput, Severity, Unreadable,
};
use crate::sites::{self, SiteError};

pub use crate::rules::{Facts, ObjectRef, Operation, Platform, Requester, RuleId, Subject};
pub use view::{FoundConfig, LabelledValues, SubjectView, Trace, ValuesField};

/// The code of a mutation finding (what the patch changes).
pub const CODE_MUTATION: &str = "mutation";
/// The code of a cloud config too large for stackgate to read.
pub const CODE_OVERSIZED: &str = "oversized";
/// The code of a site whose values come from objects the evaluation cannot see (a Flux
/// HelmRelease's `spec.valuesFrom`).
pub const CODE_UNSEEN: &str = "values-unseen";
/// The code of a ConfigMap or Secret labelled as holding the CCM chart's values
/// (`valuesLabel` of the sites document) without the data key its label names.
pub const CODE_VALUES_KEY_MISSING: &str = "values-key-missing";
/// The code of the finding that summarizes findings past [`MAX_FINDINGS_PER_LIST`].
pub const CODE_MORE: &str = "more-findings";
/// The code of an exemption annotation the webhook did not apply: its requester is not one
/// the policy lets exempt, and the stored object did not carry it already.
pub const CODE_EXEMPTION_NOT_ALLOWED: &str = "exemption-not-allowed";
/// The code of an exemption annotation `check` or `audit` did not apply: they cannot see who
/// set it, and the policy's `exemptions.annotation.unverified` is `apply`.
pub const CODE_EXEMPTION_UNVERIFIED: &str = "exemption-unverified";

/// A finding attributed to a policy, ready to show to a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Policy name.
    pub policy: String,
    /// Rule family.
    pub rule: RuleId,
    /// What kind of finding: one of the family's codes, or an engine code
    /// ([`CODE_MUTATION`], [`CODE_OVERSIZED`], [`CODE_UNSEEN`], [`CODE_VALUES_KEY_MISSING`],
    /// [`CODE_MORE`]).
    pub code: &'static str,
    /// Where in the object it is.
    pub anchor: Anchor,
    /// The object it is about.
    pub subject: Arc<ObjectRef>,
    /// The parts of its message, which each face renders when it shows the finding
    /// ([`Finding::first_line`], [`Finding::denial_text`], [`Finding::warning_text`],
    /// [`Text::one_line`]): nothing is rendered for a finding no face shows (one past
    /// [`MAX_FINDINGS_PER_LIST`], a warning the validating webhook drops).
    pub text: Text,
    /// Whether the verdict's patch fixes it. The validating webhook still reports it: by the
    /// time it runs, a missing fix means the mutation did not happen.
    pub fixed_by_patch: bool,
}

/// The parts of a finding's message. No part ever holds a value of a Secret.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Text {
    /// Where: the object, field, INI line and where that line is written
    /// (`ConfigMap kube-system/cloud-config data["cloud.conf"] line 5`), short enough for the
    /// first line: what it leaves out is in [`Text::within`].
    pub location: Option<String>,
    /// The line of the field's text the finding is at, when the location names a text that is
    /// not the cloud config (a values string: `spec.valuesContent` line 8). Its own part,
    /// written ` line N` after the location, so that a face that cannot point at it leaves it
    /// out (`check` on values it merged, whose lines are no file's).
    pub field_line: Option<usize>,
    /// Where exactly inside the field, when the location leaves it out to keep the first line
    /// short (`cloudConfig.loadBalancer.provider-requires-serial-api-calls`): a part of its own,
    /// after the first line.
    pub within: Option<String>,
    /// What is wrong (short, no final period).
    pub what: String,
    /// The action that fixes it (short, no final period); empty for a mutation note.
    pub fix: String,
    /// Why it matters, with the upstream reference; may be long.
    pub why: String,
    /// A caveat that holds only while the object is judged alone: an overlay a controller
    /// merges over it, which the write does not show, may set what was found instead (a
    /// RKE2/k3s HelmChartConfig over its HelmChart). A sentence, shown before the notes; a
    /// face that merged the overlay in leaves it out ([`Text::merged_overlay`]).
    pub unseen_overlay: Option<String>,
    /// Further caveats, each a sentence.
    pub notes: Vec<String>,
    /// The annotation that exempts the object, when the policy allows exemptions.
    pub exemption: Option<String>,
    /// Who may set it (`group platform-team or user alice`), when not everyone may: the hint
    /// names them, so that nobody is told to exempt themselves and then refused.
    pub exempters: Option<String>,
    /// The policy's upstream sources.
    pub source: String,
}

impl Text {
    /// `<location>: <what>. Fix: <fix>`: what kubectl users read first, and all they need to
    /// act (at most ~200 characters for the documentation examples, `tests/message_length.rs`).
    pub fn first_line(&self) -> String {
        let mut out = match (&self.location, self.field_line) {
            (Some(location), Some(line)) => format!("{location} line {line}: {}", self.what),
            (Some(location), None) => format!("{location}: {}", self.what),
            (None, _) => self.what.clone(),
        };
        end_sentence(&mut out);
        if !self.fix.is_empty() {
            out.push_str(" Fix: ");
            out.push_str(&self.fix);
            end_sentence(&mut out);
        }
        out
    }

    /// The first line, the why and the notes, then the exemption hint, on one line: a
    /// report row that names the source once per rule (`check`'s text report).
    pub fn one_line(&self) -> String {
        let mut out = self.first_line();
        let within = self.within_part();
        for part in within
            .iter()
            .chain(std::iter::once(&self.why))
            .chain(&self.unseen_overlay)
            .chain(&self.notes)
        {
            let part = part.trim();
            if !part.is_empty() {
                out.push(' ');
                out.push_str(part);
                end_sentence(&mut out);
            }
        }
        if let Some(key) = &self.exemption {
            out.push_str(&format!(
                " To exempt this object, {}.",
                self.exemption_hint(key)
            ));
        }
        out
    }

    /// The full text, one part per line: first line, why, notes, how to exempt, and the
    /// attribution `Policy NAME, rule RULE (stackgate explain RULE/CODE); source: …`.
    pub fn full(&self, policy: &str, rule: RuleId, code: &str) -> String {
        let mut lines = vec![self.first_line()];
        let within = self.within_part();
        lines.extend(
            within
                .iter()
                .chain(std::iter::once(&self.why))
                .chain(&self.unseen_overlay)
                .chain(&self.notes)
                .map(|p| p.trim())
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let mut p = p.to_owned();
                    end_sentence(&mut p);
                    p
                }),
        );
        if let Some(key) = &self.exemption {
            lines.push(format!("To exempt: {}.", self.exemption_hint(key)));
        }
        lines.push(format!(
            "Policy {policy}, rule {} (stackgate explain {}); source: {}",
            rule.as_str(),
            explain_code(rule, code),
            self.source.trim()
        ));
        lines.join("\n")
    }

    /// The text as a face shows it when it merged in the overlay a controller applies over the
    /// object and judged the merge (`check` evaluating a HelmChart with its HelmChartConfig):
    /// without the caveat about an unseen overlay ([`Text::unseen_overlay`]), which no longer
    /// holds, and without the line of the values text ([`Text::field_line`]), which is a line
    /// of the merged text, in no file (the face places the finding at its own line).
    pub fn merged_overlay(&mut self) {
        self.unseen_overlay = None;
        self.field_line = None;
    }

    /// `At <within>.`: the part of the location the first line leaves out, when there is one.
    fn within_part(&self) -> Option<String> {
        self.within.as_ref().map(|within| format!("At {within}."))
    }

    /// `annotate it with KEY="<reason>"`, or `have WHO annotate it with …` when the policy
    /// names who may.
    pub fn exemption_hint(&self, key: &str) -> String {
        match &self.exempters {
            Some(who) => format!("have {who} annotate it with {key}=\"<reason>\""),
            None => format!("annotate it with {key}=\"<reason>\""),
        }
    }

    /// `stackgate POLICY: <first line>`, whole within kubectl's 256 characters for the
    /// documentation examples (`stackgate explain` has the rest); a longer one (a long key
    /// from the input) is cut at [`WARNING_MAX_CHARS`], marked `…`.
    pub fn warning(&self, policy: &str) -> String {
        let full = format!("stackgate {policy}: {}", self.first_line());
        if full.chars().count() <= WARNING_MAX_CHARS {
            return full;
        }
        let mut cut: String = full.chars().take(WARNING_MAX_CHARS - 1).collect();
        cut.push('…');
        cut
    }

    /// Cuts every part at [`MAX_MESSAGE_BYTES`] (parts name keys and sections from the input,
    /// which can be arbitrarily long).
    fn cut(&mut self) {
        // Part by part rather than through a chain of iterators: this runs on every finding.
        cut_message(&mut self.what);
        cut_message(&mut self.fix);
        cut_message(&mut self.why);
        for part in [
            &mut self.location,
            &mut self.within,
            &mut self.unseen_overlay,
        ]
        .into_iter()
        .flatten()
        {
            cut_message(part);
        }
        for note in &mut self.notes {
            cut_message(note);
        }
    }
}

/// The longest warning kubectl shows whole: client-go's warning handler and the apiserver's
/// admission warning recorder keep at most 256 characters per warning (k8s.io/apiserver
/// pkg/admission/plugin/webhook/mutating/dispatcher.go and pkg/warning: longer warnings are
/// truncated).
pub const WARNING_MAX_CHARS: usize = 256;

/// The code in the form `stackgate explain` reads: `<family>/<code>` for a code of the
/// family, the code alone for an engine code (`mutation`, `oversized`, ...).
pub fn explain_code(rule: RuleId, code: &str) -> String {
    if rule.family().codes.contains(&code) {
        format!("{}/{code}", rule.as_str())
    } else {
        code.to_owned()
    }
}

/// Ends a sentence with a period unless it already ends with punctuation.
fn end_sentence(s: &mut String) {
    let trimmed = s.trim_end().len();
    s.truncate(trimmed);
    if !s.is_empty() && !s.ends_with(['.', '!', '?', '…']) {
        s.push('.');
    }
}

impl Finding {
    /// The first line: `<location>: <what>. Fix: <fix>`.
    pub fn first_line(&self) -> String {
        self.text.first_line()
    }

    /// The full text, one part per line ([`Text::full`]: first line, why, notes, exemption
    /// and attribution), rendered now and cut at [`MAX_MESSAGE_BYTES`]: the denial the
    /// validating webhook answers, and what audit annotations and the JSON `message` carry.
    pub fn denial_text(&self) -> String {
        let mut full = self.text.full(&self.policy, self.rule, self.code);
        cut_message(&mut full);
        full
    }

    /// The warning kubectl shows: `stackgate POLICY: <first line>`.
    pub fn warning_text(&self) -> String {
        self.text.warning(&self.policy)
    }

    /// Line in the cloud config, when there is one.
    pub fn line(&self) -> Option<usize> {
        match &self.anchor {
            Anchor::CloudConfig { line, .. } => *line,
            _ => None,
        }
    }

    /// JSON pointer to the field the finding is about (e.g. `/data/config`), when known.
    pub fn pointer(&self) -> Option<&str> {
        match &self.anchor {
            Anchor::Object => None,
            Anchor::Field { pointer }
            | Anchor::CloudConfig { pointer, .. }
            | Anchor::Embedded { pointer, .. } => Some(pointer),
        }
    }
}

/// Where a finding is in the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// The object as a whole.
    Object,
    /// A field of the object.
    Field {
        /// JSON pointer, e.g. `/metadata/annotations/glance.openstack.org~1wsgi`.
        pointer: String,
    },
    /// A cloud config held in the object.
    CloudConfig {
        /// JSON pointer of the field holding the config (`/data/cloud.conf`, or the values
        /// field of a Helm carrier).
        pointer: String,
        /// 1-based line in the INI text (for Helm values, in the INI the chart renders).
        line: Option<usize>,
        /// Where that line is written in the object (a values path, or a line of a string).
        trace: sites::Anchor,
    },
    /// A field of an object embedded in a ClusterResourceSet payload value of the object
    /// (an object family's finding on, e.g., a CCM DaemonSet inside the payload).
    Embedded {
        /// JSON pointer of the payload value in the object (`/stringData/ccm.yaml`).
        pointer: String,
        /// 0-based index of the document in the payload value.
        doc: usize,
        /// JSON pointer of the field in the embedded object, when the finding names one.
        inner: Option<String>,
        /// 1-based line of that field in the (decoded) payload text.
        line: usize,
        /// Where that line is written in the object (a line of the payload string; the field
        /// itself for a base64 value).
        trace: sites::Anchor,
    },
}

/// A finding that an exemption annotation admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exempted {
    /// Policy name.
    pub policy: String,
    /// Rule family.
    pub rule: RuleId,
    /// The reason from the annotation.
    pub reason: String,
    /// Why the annotation counted.
    pub basis: ExemptionBasis,
}

/// A finding that a `StackgateException` admitted: reported, never denied or warned about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excepted {
    /// The finding as the policy would have reported it.
    pub finding: Finding,
    /// The exception that covers it.
    pub exception: ExceptionNote,
}

/// What a report says about the exception that covered a finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExceptionNote {
    /// The exception's namespace.
    pub namespace: String,
    /// The exception's name.
    pub name: String,
    /// Why it was granted.
    pub reason: String,
    /// The change or ticket reference.
    pub ticket: Option<String>,
    /// When it stops exempting (RFC 3339), if it does.
    pub expires: Option<String>,
    /// Whole days left when it is within the warning window (0: less than a day).
    pub expiring_in_days: Option<i64>,
}

impl ExceptionNote {
    /// `StackgateException <ns>/<name>`.
    pub fn id(&self) -> String {
        format!("StackgateException {}/{}", self.namespace, self.name)
    }

    /// One line for a report: which exception, why, the ticket, until when, and the warning
    /// when it ends soon.
    pub fn describe(&self, policy: &str) -> String {
        let mut out = format!("excepted from policy {policy} by {}", self.id());
        match &self.ticket {
            Some(ticket) => out.push_str(&format!(" ({}; ticket {ticket})", self.reason)),
            None => out.push_str(&format!(" ({})", self.reason)),
        }
        if let Some(expires) = &self.expires {
            out.push_str(&format!(" until {expires}"));
        }
        if let Some(days) = self.expiring_in_days {
            out.push_str(&match days {
                0 => "; it expires in less than a day, then the policy applies again".to_owned(),
                1 => "; it expires in 1 day, then the policy applies again".to_owned(),
                n => format!("; it expires in {n} days, then the policy applies again"),
            });
        }
        out
    }
}

/// Why an exemption annotation counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExemptionBasis {
    /// The requester is one the policy lets exempt.
    Requester,
    /// The stored object already carried the same annotation (an UPDATE that keeps it, a
    /// DELETE).
    Stored,
    /// No requester is known (`check`, `audit`) and the policy lets anyone exempt.
    Everyone,
    /// No requester is known and the policy's `unverified: honour` counts it anyway.
    Unverified,
}

impl ExemptionBasis {
    /// How a report names it, after "exempted from policy P by annotation".
    pub fn describe(self) -> &'static str {
        match self {
            ExemptionBasis::Requester => "set by a user allowed to exempt",
            ExemptionBasis::Stored => "kept from the stored object",
            ExemptionBasis::Everyone => "anyone may exempt",
            ExemptionBasis::Unverified => {
                "unverified: who set it is unknown here, and the policy honours it"
            }
        }
    }
}

/// Everything the engine decided about one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    /// JSON Patch operations (empty: no mutation).
    pub patch: Vec<PatchOperation>,
    /// One line per policy edit, describing what the patch does.
    pub mutations: Vec<Finding>,
    /// Reasons to deny.
    pub denials: Vec<Finding>,
    /// Warnings for the client.
    pub warnings: Vec<Finding>,
    /// Findings of policies in audit mode.
    pub audits: Vec<Finding>,
    /// Findings admitted by exemption.
    pub exemptions: Vec<Exempted>,
    /// Findings a `StackgateException` admitted, each with the exception (at most
    /// [`MAX_FINDINGS_PER_LIST`]).
    pub excepted: Vec<Excepted>,
    /// Audit annotations for the apiserver's audit log.
    pub audit_annotations: BTreeMap<String, String>,
    /// Caps on untrusted input this evaluation reached, each once (for metrics).
    pub limits: Vec<Limit>,
}

/// A cap on untrusted input that an evaluation reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// A cloud config over [`MAX_CLOUD_CONFIG_BYTES`].
    CloudConfigBytes,
    /// A Helm values string over [`crate::sites::helm::MAX_VALUES_TEXT_BYTES`].
    ValuesTextBytes,
    /// A YAML values string over one of the YAML reader's caps.
    Yaml(crate::yaml::Limit),
    /// More than [`crate::sites::helm::MAX_CARRIERS_PER_OBJECT`] values carriers.
    Carriers,
    /// More than [`MAX_FINDINGS_PER_LIST`] findings in one list.
    Findings,
}

impl Limit {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::CloudConfigBytes => "cloud_config_bytes",
            Limit::ValuesTextBytes => "values_text_bytes",
            Limit::Yaml(y) => y.as_str(),
            Limit::Carriers => "values_carriers",
            Limit::Findings => "findings",
        }
    }
}

impl Verdict {
    fn reached(&mut self, limit: Limit) {
        if !self.limits.contains(&limit) {
            self.limits.push(limit);
        }
    }
}

impl Verdict {
    /// Whether the request is denied.
    pub fn denied(&self) -> bool {
        !self.denials.is_empty()
    }
}

/// The policy engine. Cheap to clone and share; rebuilt when policies or the release
/// catalog change.
#[derive(Debug, Clone)]
pub struct Engine {
    policies: Arc<PolicySet>,
    releases: Arc<Snapshot>,
    /// Families with a policy in enforce mode (a family's severity may depend on another's).
    enforced: Arc<[RuleId]>,
    /// What every finding of a policy adds to its text, one per policy of the set, in its
    /// order: built once per policy set rather than once per finding.
    added: Arc<[Added]>,
}

/// The parts of a finding's text that come from its policy, not from what was found
/// ([`Run::finding`]).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Added {
    /// [`Text::exemption`].
    exemption: Option<String>,
    /// [`Text::exempters`].
    exempters: Option<String>,
    /// [`Text::source`].
    source: String,
}

impl Added {
    fn of(policy: &Policy) -> Self {
        Added {
            exemption: policy.exemption_annotation(),
            exempters: policy
                .exemptions
                .annotation
                .as_ref()
                .filter(|rules| !rules.open_to_everyone())
                .map(|rules| rules.who()),
            source: policy.source.trim().to_owned(),
        }
    }
}

/// Where a family's output goes: the object, or one cloud config in it.
enum Target<'s> {
    /// An object or DELETE family: violations name their field, edits are a JSON Patch.
    Object,
    /// A cloud-config family on one site: violations are located in the site; edits wait in
    /// `edits`, each with its mutation finding, until every family has read the document
    /// ([`Engine::evaluate_site`] then applies them to it and makes the site's patch).
    Site {
        site: &'s FoundConfig,
        /// The site's JSON pointer, written once per site for all of its findings.
        pointer: &'s OnceCell<String>,
        doc: Option<&'s Document>,
        edits: &'s mut Vec<(IniEdit, Finding)>,
    },
    /// An object family on an object embedded in a ClusterResourceSet payload: violations are
    /// located in the payload; edits and patches are dropped (validation only).
    Embedded(&'s sites::payload::EmbeddedObject),
}

/// One evaluation: the subject, and its reference built once, when the first finding needs it.
struct Run<'a> {
    subject: &'a Subject<'a>,
    reference: OnceCell<Arc<ObjectRef>>,
    /// The cluster's platform, when an adapter knows it ([`Facts::platform`]).
    platform: Option<&'a Platform>,
    /// The exceptions in force and the instant to judge them at, when the face gave them.
    /// Without them no exception applies: the engine never guesses the time.
    exceptions: Option<&'a ExceptionsAt>,
    /// The policy set's policies and what each adds to its findings' texts (same order).
    policies: &'a [Policy],
    added: &'a [Added],
}

impl<'a> Run<'a> {
    /// The stored version of `object` when it is the subject's own: an UPDATE's old object
    /// for the written object, the object itself when it is the stored one (DELETE); none
    /// for an embedded object or a DELETE judged on the name alone.
    fn stored(&self, object: &DynamicObject) -> Option<&'a DynamicObject> {
        let same = |o: &&DynamicObject| std::ptr::eq(*o, object);
        if self.subject.object.filter(same).is_some()
            || self.subject.old_object.filter(same).is_some()
        {
            self.subject.old_object
        } else {
            None
        }
    }

    /// How an exception sees `object` (the written or stored object of this run; an object a
    /// payload embeds is matched as the object that carries it).
    fn exception_target<'o>(&'o self, object: &'o DynamicObject) -> ExceptionTarget<'o> {
        ExceptionTarget {
            kind: self.subject.kind.kind.as_str(),
            namespace: self.subject.namespace_of(object),
            name: object
                .metadata
                .name
                .as_deref()
                .unwrap_or(self.subject.name.as_str()),
            labels: object.metadata.labels.as_ref(),
        }
    }

    /// Whether an exception in force covers finding `code` of `policy` on `object`.
    fn excepts(&self, policy: &Policy, code: &str, object: &DynamicObject) -> bool {
        self.exceptions.is_some_and(|at| {
            at.covering(&policy.name, code, &self.exception_target(object))
                .is_some()
        })
    }

    /// Records `finding` of `policy` on `object` as its mode says ([`record`]), unless an
    /// exception in force covers it: then it is listed as excepted, naming the exception. An
    /// expired exception that names it adds a note and the policy applies.
    fn record(
        &self,
        policy: &Policy,
        severity: Severity,
        mut finding: Finding,
        object: &DynamicObject,
        verdict: &mut Verdict,
    ) {
        let Some(at) = self.exceptions else {
            record(policy, severity, finding, verdict);
            return;
        };
        let target = self.exception_target(object);
        if let Some((exception, state)) = at.covering(&policy.name, finding.code, &target) {
            if verdict.excepted.len() >= MAX_FINDINGS_PER_LIST {
                verdict.reached(Limit::Findings);
                return;
            }
            let note = ExceptionNote {
                namespace: exception.namespace.clone(),
                name: exception.name.clone(),
                reason: exception.reason.clone(),
                ticket: exception.ticket.clone(),
                expires: exception.expires.map(|t| t.to_string()),
                expiring_in_days: match state {
                    ExceptionState::Expiring { days_left } => Some(days_left),
                    ExceptionState::Active | ExceptionState::Expired => None,
                },
            };
            verdict
                .audit_annotations
                .entry(format!("{}-excepted", policy.name))
                .or_insert_with(|| note.id());
            verdict.excepted.push(Excepted {
                finding,
                exception: note,
            });
            return;
        }
        for expired in at.expired_for(&policy.name, finding.code, &target) {
            let expires = expired.expires.map(|t| t.to_string()).unwrap_or_default();
            finding.text.notes.push(format!(
                "Note: exception StackgateException {}/{} expired at {expires}; not applied.",
                expired.namespace, expired.name
            ));
        }
        record(policy, severity, finding, verdict);
    }

    /// The subject's reference (`Secret default/crs`), built once.
    fn outer(&self) -> &ObjectRef {
        self.reference
            .get_or_init(|| Arc::new(self.subject.reference()))
    }

    /// A finding of `policy` about this run's subject: `text` with the policy's exemption
    /// annotation and source added (a mutation note has no exemption: it is no finding to
    /// exempt). Nothing is rendered here: the faces render what they show.
    fn finding(
        &self,
        policy: &Policy,
        code: &'static str,
        anchor: Anchor,
        mut text: Text,
        fixed_by_patch: bool,
    ) -> Finding {
        let subject = self
            .reference
            .get_or_init(|| Arc::new(self.subject.reference()));
        let computed;
        // The policy is one of the set's (the engine runs no other); found by address.
        let added = match self.policies.iter().position(|p| std::ptr::eq(p, policy)) {
            Some(i) => &self.added[i],
            None => {
                computed = Added::of(policy);
                &computed
            }
        };
        if code != CODE_MUTATION {
            text.exemption.clone_from(&added.exemption);
            text.exempters.clone_from(&added.exempters);
        }
        text.source.clone_from(&added.source);
        Finding {
            policy: policy.name.clone(),
            rule: policy.rule,
            code,
            anchor,
            subject: Arc::clone(subject),
            text,
            fixed_by_patch,
        }
    }
}

impl Engine {
    /// An engine over a validated policy set.
    pub fn new(policies: PolicySet) -> Self {
        Self::with_releases(policies, Arc::new(Snapshot::empty()))
    }

    /// An engine over a policy set and a snapshot of the live `OpenStackVersion`s.
    pub fn with_releases(policies: PolicySet, releases: Arc<Snapshot>) -> Self {
        let mut enforced: Vec<RuleId> = policies
            .policies
            .iter()
            .filter(|p| p.mode == Mode::Enforce)
            .map(|p| p.rule)
            .collect();
        enforced.sort_unstable();
        enforced.dedup();
        let added = policies.policies.iter().map(Added::of).collect();
        Self {
            policies: Arc::new(policies),
            releases,
            enforced: enforced.into(),
            added,
        }
    }

    /// The same policies over a new release snapshot (what the watcher's sink stores).
    #[must_use]
    pub fn with_release_snapshot(&self, releases: Arc<Snapshot>) -> Self {
        Self {
            policies: Arc::clone(&self.policies),
            releases,
            enforced: Arc::clone(&self.enforced),
            added: Arc::clone(&self.added),
        }
    }

    /// The release snapshot in use.
    pub fn releases(&self) -> &Snapshot {
        &self.releases
    }

    /// The policy set in use.
    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }

    /// How this policy set recognises a CCM container: the `ccmImages` and `ccmArgs` of the
    /// first `ccm-concurrency` policy (defaults when there is none), the one recognition every
    /// face shares (the rules, `audit`'s restart check, the `CcmConfigSource` fact).
    pub fn ccm_marker_params(&self) -> crate::rules::concurrency::ConcurrencyParams {
        self.policies
            .for_rule(crate::rules::concurrency::FAMILY.id)
            .find_map(|p| {
                p.params
                    .get::<crate::rules::concurrency::ConcurrencyParams>()
                    .cloned()
            })
            .unwrap_or_default()
    }

    /// Evaluates one write (no gathered facts).
    pub fn evaluate(&self, subject: &Subject<'_>) -> Verdict {
        self.evaluate_with(subject, &Facts::default())
    }

    /// Evaluates one write with the facts an adapter gathered for it.
    pub fn evaluate_with(&self, subject: &Subject<'_>, facts: &Facts) -> Verdict {
        // A flag that never fires cannot stop the evaluation: the default is never used.
        self.evaluate_within(subject, facts, &Cancel::never())
            .unwrap_or_default()
    }

    /// [`Self::evaluate_with`] that stops with [`Exhausted`] once `cancel` fires (the adapter
    /// fires it when the request deadline passes). The flag is looked at between sites and
    /// between policies; a partial verdict is never returned.
    pub fn evaluate_within(
        &self,
        subject: &Subject<'_>,
        facts: &Facts,
        cancel: &Cancel,
    ) -> Result<Verdict, Exhausted> {
        let mut verdict = Verdict::default();
        let context = Context {
            catalog: &self.policies.releases,
            releases: &self.releases,
            facts,
            enforced: &self.enforced,
            cancel,
        };
        let run = Run {
            subject,
            reference: OnceCell::new(),
            platform: facts.platform(),
            exceptions: facts.exceptions::<ExceptionsAt>(),
            policies: &self.policies.policies,
            added: &self.added,
        };
        if subject.operation == Operation::Delete {
            // A DELETE without the stored object (a crafted or very old review) is judged on
            // the name alone: the DELETE families decide what an unseen object means.
            let named;
            let old = match subject.old_object {
                Some(old) => old,
                None => {
                    named = named_object(subject);
                    &named
                }
            };
            let places = sites::ObjectPlaces::new(subject.kind, old);
            self.evaluate_objects(&run, &context, &places, true, cancel, &mut verdict)?;
            return Ok(verdict);
        }
        // CONNECT is admitted; subresource writes (status, scale) cannot change what the
        // rules read.
        if !matches!(subject.operation, Operation::Create | Operation::Update)
            || subject.subresource.is_some()
        {
            return Ok(verdict);
        }
        let Some(object) = subject.object else {
            return Ok(verdict);
        };
        let namespace = subject.namespace_of(object);
        // The keys a CCM container reads as its `--cloud-config` are sites whatever the
        // object is named (the `CcmConfigSource` fact, when the face knows it).
        let read_sites = facts
            .ccm_reads()
            .and_then(|reads| reads.sites_for(subject.kind, object, &self.policies.sites));
        let site_document = read_sites.as_ref().unwrap_or(&self.policies.sites);
        // Where the object holds the CCM chart's values, read once for its sites, its CCM
        // version and its object rules.
        let places = sites::ObjectPlaces::new(subject.kind, object);
        let (found, embedded) = sites::find_with_embedded_in(&places, site_document, cancel);
        cancel.check()?;
        // Read only for objects that hold a cloud config; one read per object. A ConfigMap or
        // Secret pins no release itself: the CCM containers that read it (the
        // `CcmConfigSource` fact) do, with their image tags.
        let ccm_version = (!found.is_empty())
            .then(|| {
                sites::helm::ccm_version_in(
                    &places,
                    sites::helm::chart_names(&self.policies.sites),
                    cancel,
                )
                .or_else(|| {
                    let kind = sites::data_kind(subject.kind)?;
                    // Keyed as `CcmConfigReads::sites_for` keys the reads.
                    let ns = object.metadata.namespace.as_deref().unwrap_or("");
                    let name = object.metadata.name.as_deref().unwrap_or("");
                    facts.ccm_reads()?.version_of(kind, ns, name)
                })
            })
            .flatten();
        // Most objects' sites have no alternative: then they are evaluated as found, without
        // splitting the list in two.
        let (alternatives, found): (Vec<_>, Vec<_>) =
            if found.iter().all(|s| s.alternative.is_none()) {
                (Vec::new(), found)
            } else {
                found.into_iter().partition(|s| s.alternative.is_some())
            };
        for site in found {
            cancel.check()?;
            self.evaluate_site(
                &run,
                &context,
                &site,
                object,
                namespace,
                ccm_version.as_ref(),
                &mut verdict,
            );
        }
        let mut groups: BTreeMap<usize, Vec<FoundConfig>> = BTreeMap::new();
        for site in alternatives {
            let group = site.alternative.as_ref().map_or(0, |a| a.group);
            groups.entry(group).or_default().push(site);
        }
        for sites in groups.into_values() {
            let mut results = Vec::with_capacity(sites.len());
            for site in &sites {
                cancel.check()?;
                let mut own = Verdict::default();
                let ccm = ccm_version.as_ref();
                self.evaluate_site(&run, &context, site, object, namespace, ccm, &mut own);
                results.push((site, own));
            }
            merge_alternatives(results, &mut verdict);
        }
        self.evaluate_objects(&run, &context, &places, false, cancel, &mut verdict)?;
        self.refuse_unallowed_annotations(&run, object, namespace, &mut verdict);
        for inner in &embedded {
            self.evaluate_embedded(&run, &context, object, inner, cancel, &mut verdict)?;
        }
        cancel.check()?;
        limit_findings(&mut verdict);
        Ok(verdict)
    }

    /// An exemption annotation the webhook's requester may not set is a finding of its policy
    /// even where the policy found nothing: stored, it would count on every later UPDATE as
    /// "already present" and exempt the object from then on.
    fn refuse_unallowed_annotations(
        &self,
        run: &Run<'_>,
        object: &DynamicObject,
        namespace: Option<&str>,
        verdict: &mut Verdict,
    ) {
        // Without an exemption annotation there is none to refuse: one look at the
        // annotations rather than one per policy.
        if run.subject.requester == Requester::Unknown || !carries_exemptions(object) {
            return;
        }
        for policy in self.policies.policies.iter() {
            if policy.mode == Mode::Off || !policy.scope.covers(namespace) {
                continue;
            }
            if judge(
                run.subject.requester,
                policy,
                object,
                run.subject.old_object,
            ) == Judgement::NotAllowed
            {
                not_applied(run, policy, object, CODE_EXEMPTION_NOT_ALLOWED, verdict);
            }
        }
    }

    /// Runs every enabled policy of the object families (`delete`: of the DELETE families)
    /// on `object`, in policy order.
    fn evaluate_objects(
        &self,
        run: &Run<'_>,
        context: &Context<'_>,
        places: &sites::ObjectPlaces<'_>,
        delete: bool,
        cancel: &Cancel,
        verdict: &mut Verdict,
    ) -> Result<(), Exhausted> {
        let object = places.object();
        let namespace = run.subject.namespace_of(object);
        for policy in self.policies.policies.iter() {
            let check = match policy.rule.family().check {
                Check::Object(check) if !delete => check,
                Check::Delete(check) if delete => check,
                _ => continue,
            };
            if policy.mode == Mode::Off || !policy.scope.covers(namespace) {
                continue;
            }
            cancel.check()?;
            let output = check(&ObjectInput {
                subject: run.subject,
                object,
                places,
                namespace,
                params: &policy.params,
                context,
            });
            self.apply(run, policy, object, output, Target::Object, verdict);
        }
        Ok(())
    }

    /// Runs the object families that read objects embedded in payloads ([`Family::embedded`])
    /// on `inner`, an object of a ClusterResourceSet payload value of `outer`.
    ///
    /// Semantics: the inner object is evaluated as a CREATE of itself, on every write of the
    /// payload (CREATE or UPDATE). The ClusterResourceSet controller creates the payload's
    /// objects in each workload cluster it matches, so a CREATE is what the payload is for
    /// every cluster it will reach. On an UPDATE of the payload the webhook cannot tell whether
    /// existing clusters see the change: with the default strategy `ApplyOnce` they never do
    /// (only clusters matched later get the new objects, as new objects), with `Reconcile`
    /// they do — and the strategy is in the ClusterResourceSet, not in the payload. So an
    /// UPDATE-only finding (a cluster-name rename) is not claimed: under `ApplyOnce` it would
    /// be wrong.
    ///
    /// Scope and exemptions: the policy's namespace scope is the outer object's namespace
    /// (the write being judged, as for payload cloud-config sites); an exemption annotation
    /// on the outer object, or on the inner object itself (the same manifest applied on its
    /// own would be exempt by it), exempts the finding.
    ///
    /// [`Family::embedded`]: crate::rules::Family::embedded
    fn evaluate_embedded(
        &self,
        run: &Run<'_>,
        context: &Context<'_>,
        outer: &DynamicObject,
        inner: &sites::payload::EmbeddedObject,
        cancel: &Cancel,
        verdict: &mut Verdict,
    ) -> Result<(), Exhausted> {
        let namespace = run.subject.namespace_of(outer);
        let subject = Subject::create(&inner.gvk, &inner.object);
        let places = sites::ObjectPlaces::new(&inner.gvk, &inner.object);
        for policy in self.policies.policies.iter() {
            let family = policy.rule.family();
            let Check::Object(check) = family.check else {
                continue;
            };
            if !family.embedded || policy.mode == Mode::Off || !policy.scope.covers(namespace) {
                continue;
            }
            cancel.check()?;
            let output = check(&ObjectInput {
                subject: &subject,
                object: &inner.object,
                places: &places,
                namespace: subject.namespace_of(&inner.object),
                params: &policy.params,
                context,
            });
            if output.violations.is_empty() || exempted(run, policy, &inner.object, None, verdict) {
                continue;
            }
            let target = Target::Embedded(inner);
            self.apply(run, policy, outer, output, target, verdict);
        }
        Ok(())
    }

    /// Applies a policy's mode and exemption to what its family found: records findings in
    /// the verdict's lists, and the family's edits as mutations and patch operations.
    fn apply(
        &self,
        run: &Run<'_>,
        policy: &Policy,
        object: &DynamicObject,
        output: RuleOutput,
        target: Target<'_>,
        verdict: &mut Verdict,
    ) {
        if output.is_empty() {
            return;
        }
        if exempted(run, policy, object, run.stored(object), verdict) {
            return;
        }
        // An exception that covers one of the findings leaves the policy's edits out: they
        // would undo what the exception allows (the other findings are still reported).
        let excepted = output
            .violations
            .iter()
            .any(|v| run.excepts(policy, v.code, object));
        let applies = matches!(policy.mode, Mode::Enforce | Mode::Warn);
        let edits = applies && !excepted;
        let finding = |code, anchor, message, fixed_by_patch| {
            run.finding(policy, code, anchor, message, fixed_by_patch)
        };
        match target {
            Target::Object => {
                let patched = edits && !output.patch.is_empty();
                for mut v in output.violations {
                    let anchor = match v.pointer.take() {
                        Some(pointer) => Anchor::Field { pointer },
                        None => Anchor::Object,
                    };
                    let text = Text {
                        location: v.location.take(),
                        ..text_of(&mut v)
                    };
                    let f = finding(v.code, anchor, text, patched && v.fixed_by_edit);
                    run.record(policy, v.severity, f, object, verdict);
                }
                if !edits {
                    return;
                }
                for m in output.mutations {
                    let anchor = match m.pointer {
                        Some(pointer) => Anchor::Field { pointer },
                        None => Anchor::Object,
                    };
                    let text = Text {
                        what: m.message,
                        ..Text::default()
                    };
                    verdict
                        .mutations
                        .push(finding(CODE_MUTATION, anchor, text, true));
                }
                // Two policies of one family may both create a missing parent (e.g. an empty
                // `metadata.annotations`); applying that twice would drop the first one's keys.
                for op in output.patch {
                    if !verdict.patch.contains(&op) {
                        verdict.patch.push(op);
                    }
                }
            }
            Target::Embedded(inner) => {
                // Validation only: an object family's edits are for the object it reads, and
                // the payload is not that object (`output.patch`, `output.mutations` dropped).
                for mut v in output.violations {
                    let line = inner.line(v.pointer.as_deref());
                    let anchor = Anchor::Embedded {
                        pointer: inner.pointer(),
                        doc: inner.doc,
                        inner: v.pointer.take(),
                        line,
                        trace: inner.trace(line),
                    };
                    // Workload locations begin with the inner object's name; others (chart
                    // values) do not, and get it in the payload's description.
                    let named = v
                        .location
                        .as_deref()
                        .is_some_and(|l| l.starts_with(&format!("{} ", inner.reference())));
                    let mut location = format!("{} {}", run.outer(), inner.describe(line, named));
                    if let Some(own) = &v.location {
                        location = format!("{location}: {own}");
                    }
                    let text = Text {
                        location: Some(location),
                        ..text_of(&mut v)
                    };
                    let f = finding(v.code, anchor, text, false);
                    run.record(policy, v.severity, f, object, verdict);
                }
            }
            Target::Site {
                site,
                pointer,
                doc,
                edits: pending,
            } => {
                // An edit that will be applied fixes the violations the rule marks as such.
                let edits_apply =
                    edits && site.mutable && doc.is_some() && !output.edits.is_empty();
                let at = |line: Option<usize>| Anchor::CloudConfig {
                    pointer: pointer.get_or_init(|| site.pointer()).clone(),
                    line,
                    trace: site.trace(line),
                };
                for mut v in output.violations {
                    let located = site.locate(v.line);
                    let mut text = Text {
                        location: Some(located.at),
                        field_line: located.field_line,
                        within: located.within,
                        ..text_of(&mut v)
                    };
                    if !site.mutable
                        && let Some(note) = &site.note
                    {
                        text.notes
                            .push(format!("Note: this object is validated only: {note}."));
                    }
                    for reader in &site.read_by {
                        text.notes
                            .push(format!("Note: the CCM reads this config: {reader}."));
                    }
                    let f = finding(v.code, at(v.line), text, edits_apply && v.fixed_by_edit);
                    run.record(policy, v.severity, f, object, verdict);
                }
                if !edits_apply {
                    return;
                }
                for edit in output.edits {
                    let text = Text {
                        what: edit_note(&edit),
                        ..Text::default()
                    };
                    // Located once applied: the line is the edited document's.
                    let f = finding(CODE_MUTATION, Anchor::Object, text, true);
                    pending.push((edit, f));
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn evaluate_site(
        &self,
        run: &Run<'_>,
        context: &Context<'_>,
        site: &FoundConfig,
        object: &DynamicObject,
        namespace: Option<&str>,
        ccm_version: Option<&sites::helm::CcmVersion>,
        verdict: &mut Verdict,
    ) {
        if site.other_platforms && on_another_platform(run.platform) {
            // The cluster itself says it is not on OpenStack: whatever this shared site holds,
            // it is not an OpenStack CCM config. The fact only ever removes a site.
            return;
        }
        // Sites whose values stackgate cannot see or read as Helm would: one warning, no rule.
        let unreadable = match &site.text {
            Err(SiteError::Unseen { location, sources }) => Some((
                CODE_UNSEEN,
                Text {
                    location: Some(format!("{} {location}", site.object)),
                    what: format!(
                        "values come from {sources}, which this run cannot see, so stackgate \
                         cannot check the rendered cloud config"
                    ),
                    fix: "run `stackgate check` where those values are".to_owned(),
                    why: format!(
                        "stackgate makes no claim about the cloud config the chart renders from \
                         values it cannot see. Check that those values set \
                         cloudConfig.loadBalancer.provider-requires-serial-api-calls: true and a \
                         config the CCM accepts: run `stackgate check` over a tree that holds \
                         them (the values files, or the objects and the kustomization that \
                         generates them), or pipe the built stream in (`kustomize build DIR | \
                         stackgate check -`); {}",
                        self.labelling_hint()
                    ),
                    ..Text::default()
                },
            )),
            Err(SiteError::PostRendered {
                location,
                renderers,
            }) => Some((
                CODE_UNSEEN,
                Text {
                    location: Some(format!("{} {location}", site.object)),
                    what: format!(
                        "{renderers} change the manifests the chart renders after stackgate \
                         checked the values, and this run cannot see what they render"
                    ),
                    fix: "check what the release renders: `helm template` with these values, \
                          the post-renderers applied, piped into `stackgate check -`; or make \
                          the change in the values"
                        .to_owned(),
                    why: "stackgate checked the cloud config these values render (its findings \
                          on this object stand for that); a post-renderer can still rewrite the \
                          cloud-config Secret or the CCM DaemonSet (its --cloud-config, its \
                          mounts) after that, which no values show."
                        .to_owned(),
                    ..Text::default()
                },
            )),
            Err(SiteError::ValuesKeyMissing { location, label }) => Some((
                CODE_VALUES_KEY_MISSING,
                Text {
                    location: Some(site.object.clone()),
                    what: format!("no {location}, the key its label {label} names"),
                    fix: "set the label to the key that holds the values, or add the key"
                        .to_owned(),
                    why: "The label names the key that holds the \
                          openstack-cloud-controller-manager chart's values, so there are no \
                          values here to check, and a Flux HelmRelease whose valuesFrom names \
                          that key fails to reconcile (unless the reference is optional)."
                        .to_owned(),
                    ..Text::default()
                },
            )),
            // Helm stops at such an entry: nothing is rendered from these values, and which
            // config the CCM keeps is not known here.
            Err(entry @ SiteError::SetEntry { .. }) => Some((
                CODE_UNSEEN,
                Text {
                    location: Some(site.object.clone()),
                    what: entry.to_string(),
                    fix: "write it as Helm's --set reads it (`a.b=value`, `list[0]=value`, \
                          `a\\.b` for a dot inside a key)"
                        .to_owned(),
                    why: "Helm stops at such an entry, so stackgate cannot tell what the chart \
                          renders and makes no claim about the cloud config."
                        .to_owned(),
                    ..Text::default()
                },
            )),
            _ => None,
        };
        if let Some((code, text)) = unreadable {
            let kind = (Severity::Warn, code);
            self.evaluate_unreadable_site(run, site, object, namespace, kind, text, verdict);
            return;
        }
        // Which input cap this site reached, and whether it is too large to read at all.
        let (limit, oversized) = match &site.text {
            Ok(text) if text.len() > MAX_CLOUD_CONFIG_BYTES => (
                Some(Limit::CloudConfigBytes),
                Some(format!(
                    "the cloud config is {} bytes, over stackgate's limit of \
                     {MAX_CLOUD_CONFIG_BYTES} bytes for one cloud config",
                    text.len()
                )),
            ),
            Err(e @ SiteError::TooLarge { .. }) => {
                (Some(Limit::ValuesTextBytes), Some(e.to_string()))
            }
            Err(e @ SiteError::TooManyCarriers { .. }) => {
                (Some(Limit::Carriers), Some(e.to_string()))
            }
            Err(e @ SiteError::SetTooLarge { limit, .. }) => {
                (Some(Limit::Yaml(limit.yaml_limit())), Some(e.to_string()))
            }
            Err(SiteError::Yaml { error, .. }) => (error.limit.map(Limit::Yaml), None),
            _ => (None, None),
        };
        if site.other_platforms && oversized.is_some() {
            // Too large to tell whose config it is: not ours to refuse.
            return;
        }
        if let Some(limit) = limit {
            verdict.reached(limit);
        }
        if let Some(what) = oversized {
            let text = Text {
                location: Some(site.describe(None)),
                what: format!("{what}, so stackgate cannot check it"),
                fix: "remove what does not belong there".to_owned(),
                why: "A CCM cloud config and the CCM chart's values are a few KiB; stackgate \
                      refuses to read more, so that a hostile object cannot cost it hundreds \
                      of MiB."
                    .to_owned(),
                ..Text::default()
            };
            let kind = (Severity::Deny, CODE_OVERSIZED);
            self.evaluate_unreadable_site(run, site, object, namespace, kind, text, verdict);
            return;
        }
        let parsed = site
            .text
            .as_ref()
            .map(|text| Document::parse(text.expose()));
        if site.other_platforms && !is_openstack_site(site, &parsed) {
            // Another platform's cloud config (YAML on vSphere, JSON on Nutanix, a GCE or AWS
            // gcfg): no finding and, above all, no OpenStack key written into it.
            return;
        }
        let doc_view: Result<&Document, Unreadable<'_>> = match &parsed {
            Err(e) => Err(Unreadable::Site(e)),
            Ok(Err(e)) => Err(Unreadable::Parse(e)),
            Ok(Ok(doc)) => Ok(doc),
        };
        let view = ConfigView {
            doc: doc_view,
            secret: site.secret,
            configmap: site.is_configmap(),
            values_source: site.values_source,
            ccm_version,
        };
        let mut edits: Vec<(IniEdit, Finding)> = Vec::new();
        let pointer = OnceCell::new();
        let mut reported_unreadable = false;
        for family in FAMILIES {
            let Check::CloudConfig(check) = family.check else {
                continue;
            };
            for policy in self.policies.for_rule(family.id) {
                if !policy.scope.covers(namespace) {
                    continue;
                }
                if view.doc.is_err() && reported_unreadable {
                    // An unreadable config is reported once, by the first family that ran
                    // (integrity, when it is on).
                    continue;
                }
                let output = check(&view, &policy.params, context);
                if output.is_empty() {
                    continue;
                }
                reported_unreadable = view.doc.is_err();
                let target = Target::Site {
                    site,
                    pointer: &pointer,
                    doc: view.doc.as_ref().ok().copied(),
                    edits: &mut edits,
                };
                self.apply(run, policy, object, output, target, verdict);
            }
        }
        // Every family has read the document as written: the edits now go into it (no copy),
        // in the order the families asked for them, each mutation finding at its line.
        let (false, Ok(Ok(mut doc))) = (edits.is_empty(), parsed) else {
            return;
        };
        let mut applied = Vec::with_capacity(edits.len());
        for (edit, mut f) in edits {
            let summary = doc.set(edit.section, edit.key, edit.value);
            let line = Some(summary.line);
            let located = site.locate(line);
            f.text.location = Some(located.at);
            f.text.field_line = located.field_line;
            f.text.within = located.within;
            f.anchor = Anchor::CloudConfig {
                pointer: pointer.get_or_init(|| site.pointer()).clone(),
                line,
                trace: site.trace(line),
            };
            verdict.mutations.push(f);
            applied.push(edit);
        }
        verdict.patch.extend(site.patch(&doc, &applied));
    }
}

/// Merges the verdicts of the sites a delivery renders depending on a chart version it does
/// not pin, or on an umbrella chart's switch it does not show ([`sites::Alternative`], one
/// values place). A denial stands only when every reading is denied; otherwise it is a
/// warning that asks to pin the chart version, or says the umbrella may switch the subchart
/// off. The fixes of all readings apply together: each edits only what its chart versions read
/// (a missing key added to `cloudConfig`, or to `cloudConfigContents`), which changes nothing
/// for the others (nor for a subchart switched off, which renders nothing); when two write one
/// field differently, none applies.
fn merge_alternatives(results: Vec<(&FoundConfig, Verdict)>, verdict: &mut Verdict) {
    let Some(of) = results
        .first()
        .and_then(|(site, _)| site.alternative.as_ref())
        .map(|a| a.of)
    else {
        return;
    };
    let denied: BTreeSet<usize> = results
        .iter()
        .filter(|(_, own)| own.denied())
        .filter_map(|(site, _)| site.alternative.as_ref().map(|a| a.class))
        .collect();
    let every = denied.len() == of;
    let mut patch: Vec<PatchOperation> = Vec::new();
    let mut conflict = false;
    for op in results.iter().flat_map(|(_, own)| own.patch.iter()) {
        if patch.contains(op) {
            continue;
        }
        conflict |= patch.iter().any(|p| p.path() == op.path());
        patch.push(op.clone());
    }
    for (site, mut own) in results {
        let (versions, by_version, switch) =
            site.alternative.as_ref().map_or(("", false, None), |a| {
                (a.versions.as_str(), a.by_version, a.switch.as_deref())
            });
        let mut notes = Vec::new();
        if by_version {
            notes.push(format!(
                "Note: chart versions {versions} render this config; the chart version is not \
                 pinned to one generation here, so stackgate reads each config the chart could \
                 render."
            ));
        }
        if let Some(switch) = switch {
            notes.push(format!(
                "Note: this is an umbrella chart's subchart; its Chart.yaml, not shown here, \
                 decides whether it renders (a dependency condition or tag could read {switch}), \
                 so stackgate reads it both rendered and switched off."
            ));
        }
        if !every {
            let findings = std::mem::take(&mut own.denials);
            own.warnings.extend(findings.into_iter().map(|mut f| {
                if by_version {
                    // Only some chart versions render this config: the first line says so.
                    f.text.fix = format!("pin the chart version, or {}", f.text.fix);
                    f.text.notes.push(format!(
                        "Note: not denied, as only chart versions {versions} render this config."
                    ));
                }
                if switch.is_some() {
                    // The first line (a webhook's one-line warning) says it too.
                    f.text.fix = format!(
                        "if the umbrella's Chart.yaml renders this subchart, {}",
                        f.text.fix
                    );
                    f.text.notes.push(
                        "Note: not denied, as the umbrella chart may switch this subchart off; \
                         the fix is right either way."
                            .to_owned(),
                    );
                }
                f
            }));
        }
        if conflict {
            own.mutations.clear();
        }
        for list in [
            &mut own.denials,
            &mut own.warnings,
            &mut own.audits,
            &mut own.mutations,
        ] {
            for f in list.iter_mut() {
                f.text.notes.extend(notes.iter().cloned());
                f.fixed_by_patch &= !conflict;
            }
        }
        verdict.denials.append(&mut own.denials);
        verdict.warnings.append(&mut own.warnings);
        verdict.audits.append(&mut own.audits);
        verdict.mutations.append(&mut own.mutations);
        verdict.exemptions.append(&mut own.exemptions);
        verdict.audit_annotations.append(&mut own.audit_annotations);
        for limit in own.limits {
            verdict.reached(limit);
        }
    }
    if !conflict {
        for op in patch {
            if !verdict.patch.contains(&op) {
                verdict.patch.push(op);
            }
        }
    }
}

/// Whether the cluster is known to run on a platform other than OpenStack (the OpenShift
/// `Infrastructure` fact). Unknown is not another platform: the content decides then.
fn on_another_platform(platform: Option<&Platform>) -> bool {
    matches!(platform, Some(Platform::Other(_)))
}

/// Whether a site that other platforms share holds an OpenStack cloud config: a parsed
/// config with an OpenStack-only section or key, or a text gcfg cannot parse that is still
/// INI-shaped (its syntax error is reported). Anything else is another platform's.
fn is_openstack_site(
    site: &FoundConfig,
    parsed: &Result<Result<Document, crate::cloudconf::ParseError>, &SiteError>,
) -> bool {
    use crate::cloudconf::schema::{is_openstack_config, looks_like_gcfg};
    match parsed {
        Ok(Ok(doc)) => is_openstack_config(doc),
        Ok(Err(_)) => site
            .text
            .as_ref()
            .is_ok_and(|text| looks_like_gcfg(text.expose())),
        // Unreadable (base64, UTF-8): nothing tells whose it is; it is reported as before.
        Err(_) => true,
    }
}

/// Largest cloud config stackgate parses, in bytes. The CCM's cloud configs are a few KiB
/// (the largest real one in `tests/fixtures` is under 4 KiB); a parsed config costs tens of
/// times its size in memory, so a multi-megabyte one from a hostile tenant would cost
/// hundreds of MiB. A larger one is reported, once, as a config stackgate cannot check.
pub const MAX_CLOUD_CONFIG_BYTES: usize = 256 * 1024;

/// Most findings of one kind (denials, warnings, audits, mutations) a verdict lists for one
/// object; past it, one finding per policy says how many more there are. Rules aggregate
/// repeated findings themselves; this is the second line of defence that keeps a response
/// small whatever a rule emits.
pub const MAX_FINDINGS_PER_LIST: usize = 20;

/// Longest message a finding carries, in bytes (cut at a character boundary, marked `…`).
/// Messages name keys and sections from the input, which can be arbitrarily long.
pub const MAX_MESSAGE_BYTES: usize = 4096;

/// Applies [`MAX_FINDINGS_PER_LIST`] and [`MAX_MESSAGE_BYTES`] to a verdict.
fn limit_findings(verdict: &mut Verdict) {
    let mut capped = false;
    for list in [
        &mut verdict.denials,
        &mut verdict.warnings,
        &mut verdict.audits,
        &mut verdict.mutations,
    ] {
        for f in list.iter_mut().take(MAX_FINDINGS_PER_LIST) {
            f.text.cut();
        }
        if list.len() <= MAX_FINDINGS_PER_LIST {
            continue;
        }
        capped = true;
        let dropped = list.split_off(MAX_FINDINGS_PER_LIST);
        // One summary per policy whose findings were dropped, in order of first appearance.
        let mut summaries: Vec<(Finding, usize)> = Vec::new();
        for f in dropped {
            match summaries.iter_mut().find(|(s, _)| s.policy == f.policy) {
                Some((_, n)) => *n += 1,
                None => summaries.push((f, 1)),
            }
        }
        for (first, n) in summaries {
            let text = Text {
                location: None,
                field_line: None,
                within: None,
                what: format!(
                    "… and {n} more finding{} of policy {} (rule {}) on this object",
                    if n == 1 { "" } else { "s" },
                    first.policy,
                    first.rule.as_str()
                ),
                fix: "run `stackgate check` on it to see them all".to_owned(),
                why: format!(
                    "A verdict lists at most {MAX_FINDINGS_PER_LIST} findings of one kind, so \
                     that an answer stays small whatever the object holds."
                ),
                unseen_overlay: None,
                notes: Vec::new(),
                exemption: first.text.exemption.clone(),
                exempters: first.text.exempters.clone(),
                source: first.text.source.clone(),
            };
            list.push(Finding {
                code: CODE_MORE,
                anchor: Anchor::Object,
                text,
                ..first
            });
        }
    }
    for v in verdict.audit_annotations.values_mut() {
        cut_message(v);
    }
    if capped {
        verdict.reached(Limit::Findings);
    }
}

fn cut_message(message: &mut String) {
    if message.len() <= MAX_MESSAGE_BYTES {
        return;
    }
    let mut end = MAX_MESSAGE_BYTES - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message.truncate(end);
    message.push('…');
}

impl Engine {
    /// The end of the unseen-values warning: how to have the values checked where they are
    /// written (the sites document's `valuesLabel`), when the policy set has that label.
    fn labelling_hint(&self) -> String {
        match &self.policies().sites.values_label {
            Some(label) => format!(
                "or label the values Secret or ConfigMap `{label}=<data key>` so that \
                 stackgate checks the values where they are written"
            ),
            None => "the values are checked where they are written only by such a run".into(),
        }
    }

    /// A site stackgate cannot read, reported once by the first cloud-config policy that
    /// covers the namespace; no rule runs and no edit is made. Two cases:
    /// - oversized: a cloud config over [`MAX_CLOUD_CONFIG_BYTES`], or Helm values over
    ///   [`crate::sites::helm::MAX_VALUES_TEXT_BYTES`] — `Severity::Deny` (denied in enforce
    ///   mode, like an unreadable config), code [`CODE_OVERSIZED`];
    /// - unseen: values that come from objects or files this evaluation cannot see — what the
    ///   chart renders is unknown, so nothing is claimed about the CCM: `Severity::Warn`, code
    ///   [`CODE_UNSEEN`]; likewise a `--set`-like entry Helm cannot read.
    #[allow(clippy::too_many_arguments)]
    fn evaluate_unreadable_site(
        &self,
        run: &Run<'_>,
        site: &FoundConfig,
        object: &DynamicObject,
        namespace: Option<&str>,
        (severity, code): (Severity, &'static str),
        text: Text,
        verdict: &mut Verdict,
    ) {
        let Some(policy) = FAMILIES
            .iter()
            .filter(|f| f.reads_cloud_configs())
            .flat_map(|f| self.policies.for_rule(f.id))
            .find(|p| p.scope.covers(namespace))
        else {
            return;
        };
        if exempted(run, policy, object, run.stored(object), verdict) {
            return;
        }
        let anchor = Anchor::CloudConfig {
            pointer: site.pointer(),
            line: None,
            trace: site.trace(None),
        };
        let finding = run.finding(policy, code, anchor, text, false);
        run.record(policy, severity, finding, object, verdict);
    }
}

/// `stackgate set [SECTION] KEY = VALUE`: what a mutation finding says about one INI edit
/// (written without going through `fmt`: a patched review makes one per edit).
fn edit_note(edit: &IniEdit) -> String {
    let parts = [
        "stackgate set [",
        edit.section,
        "] ",
        edit.key,
        " = ",
        edit.value,
    ];
    let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.push_str(part);
    }
    out
}

/// Applies the policy mode to one finding.
fn record(policy: &Policy, severity: Severity, finding: Finding, verdict: &mut Verdict) {
    match (policy.mode, severity) {
        (Mode::Enforce, Severity::Deny) => verdict.denials.push(finding),
        (Mode::Enforce | Mode::Warn, _) => verdict.warnings.push(finding),
        (Mode::Audit, _) => {
            verdict
                .audit_annotations
                .entry(format!("{}-finding", policy.name))
                .or_insert_with(|| finding.denial_text());
            verdict.audits.push(finding);
        }
        (Mode::Off, _) => {}
    }
}

/// What an exemption annotation on an object counts for, for one policy and requester.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Judgement {
    /// No annotation for the policy, or one without a reason, or a policy the annotation
    /// cannot exempt from.
    Absent,
    /// It exempts, with its reason.
    Counts(String, ExemptionBasis),
    /// The webhook's requester may not exempt, and the stored object did not carry it.
    NotAllowed,
    /// `check` or `audit`: who set it is unknown, and the policy applies regardless.
    Unverified,
}

/// Judges `object`'s annotation for `policy` (see [`crate::policy::AnnotationExemption`]).
/// `stored` is the stored version of the same object (an UPDATE's `oldObject`, a DELETE's
/// object itself), whose identical annotation keeps counting whoever writes now.
fn judge(
    requester: Requester<'_>,
    policy: &Policy,
    object: &DynamicObject,
    stored: Option<&DynamicObject>,
) -> Judgement {
    let Some(rules) = &policy.exemptions.annotation else {
        return Judgement::Absent;
    };
    let Some(raw) = exemption_annotation(object, &policy.name) else {
        return Judgement::Absent;
    };
    let reason = raw.trim();
    if reason.is_empty() {
        return Judgement::Absent;
    }
    let counts = |basis| Judgement::Counts(reason.to_owned(), basis);
    match requester {
        Requester::User { username, groups } => {
            if rules.allows(username, groups) {
                counts(ExemptionBasis::Requester)
            } else if stored.and_then(|o| exemption_annotation(o, &policy.name)) == Some(raw) {
                counts(ExemptionBasis::Stored)
            } else {
                Judgement::NotAllowed
            }
        }
        Requester::Unknown if rules.open_to_everyone() => counts(ExemptionBasis::Everyone),
        Requester::Unknown => match rules.unverified() {
            crate::policy::Unverified::Honour => counts(ExemptionBasis::Unverified),
            crate::policy::Unverified::Apply => Judgement::Unverified,
        },
    }
}

/// `object`'s exemption annotation for the policy named `policy` (the value of
/// `stackgate.dev/exempt.<policy>`), found without building the key: it is looked up for
/// every policy on every review.
fn exemption_annotation<'o>(object: &'o DynamicObject, policy: &str) -> Option<&'o str> {
    let prefix = crate::policy::EXEMPT_ANNOTATION_PREFIX;
    object
        .metadata
        .annotations
        .as_ref()?
        .range::<str, _>((
            std::ops::Bound::Included(prefix),
            std::ops::Bound::Unbounded,
        ))
        .take_while(|(key, _)| key.starts_with(prefix))
        .find(|(key, _)| key.get(prefix.len()..) == Some(policy))
        .map(|(_, value)| value.as_str())
}

/// Whether `object` carries an annotation of the exemption prefix at all (for some policy:
/// [`exemption_annotation`] finds none for any policy otherwise).
fn carries_exemptions(object: &DynamicObject) -> bool {
    let prefix = crate::policy::EXEMPT_ANNOTATION_PREFIX;
    object
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|annotations| {
            annotations
                .range::<str, _>((
                    std::ops::Bound::Included(prefix),
                    std::ops::Bound::Unbounded,
                ))
                .next()
                .is_some_and(|(key, _)| key.starts_with(prefix))
        })
}

/// Records an exemption and returns true when `object`'s annotation exempts it from
/// `policy`; an annotation that does not count is recorded as a finding of the policy
/// ([`CODE_EXEMPTION_NOT_ALLOWED`], [`CODE_EXEMPTION_UNVERIFIED`]) and the policy applies.
fn exempted(
    run: &Run<'_>,
    policy: &Policy,
    object: &DynamicObject,
    stored: Option<&DynamicObject>,
    verdict: &mut Verdict,
) -> bool {
    match judge(run.subject.requester, policy, object, stored) {
        Judgement::Absent => false,
        Judgement::Counts(reason, basis) => {
            verdict
                .audit_annotations
                .insert(format!("{}-exempted", policy.name), reason.clone());
            if !verdict.exemptions.iter().any(|e| e.policy == policy.name) {
                verdict.exemptions.push(Exempted {
                    policy: policy.name.clone(),
                    rule: policy.rule,
                    reason,
                    basis,
                });
            }
            true
        }
        Judgement::NotAllowed => {
            not_applied(run, policy, object, CODE_EXEMPTION_NOT_ALLOWED, verdict);
            false
        }
        Judgement::Unverified => {
            not_applied(run, policy, object, CODE_EXEMPTION_UNVERIFIED, verdict);
            false
        }
    }
}

/// Records, once per policy, that `object`'s exemption annotation was not applied (`code`):
/// a denial where the policy enforces ([`CODE_EXEMPTION_NOT_ALLOWED`]: nobody may switch a
/// guardrail off for themselves, and an annotation stored now would count on every later
/// UPDATE), a warning for [`CODE_EXEMPTION_UNVERIFIED`].
fn not_applied(
    run: &Run<'_>,
    policy: &Policy,
    object: &DynamicObject,
    code: &'static str,
    verdict: &mut Verdict,
) {
    let recorded = [&verdict.denials, &verdict.warnings, &verdict.audits]
        .into_iter()
        .flatten()
        .any(|f| f.code == code && f.policy == policy.name);
    let Some(rules) = &policy.exemptions.annotation else {
        return;
    };
    if recorded {
        return;
    }
    let key = format!("{}{}", crate::policy::EXEMPT_ANNOTATION_PREFIX, policy.name);
    let who = rules.who();
    let outer = run
        .subject
        .object
        .or(run.subject.old_object)
        .is_some_and(|o| std::ptr::eq(o, object));
    let (anchor, location) = if outer {
        (
            Anchor::Field {
                pointer: format!(
                    "/metadata/annotations/{}",
                    key.replace('~', "~0").replace('/', "~1")
                ),
            },
            Some(format!("{} metadata.annotations[\"{key}\"]", run.outer())),
        )
    } else {
        (
            Anchor::Object,
            Some(format!(
                "{} (an object it embeds) metadata.annotations[\"{key}\"]",
                run.outer()
            )),
        )
    };
    let (severity, what, fix) = if code == CODE_EXEMPTION_NOT_ALLOWED {
        (
            Severity::Deny,
            "exemption annotation set by a user not allowed to exempt; not applied".to_owned(),
            format!("remove it, or have {who} set it"),
        )
    } else {
        (
            Severity::Warn,
            "exemption annotation unverified (who set it is unknown here); not applied".to_owned(),
            format!(
                "have {who} set it in the cluster, where the webhook checks who does, or use \
                 `exemptions.annotation.unverified: honour` in policy {}",
                policy.name
            ),
        )
    };
    let text = Text {
        location,
        what,
        fix,
        why: format!(
            "Policy {} counts its exemption annotation only when {who} sets it, or when the \
             stored object already carries it unchanged, so that nobody can switch the policy \
             off for their own objects; it applies as if the annotation were absent",
            policy.name
        ),
        ..Text::default()
    };
    let mut finding = run.finding(policy, code, anchor, text, false);
    finding.text.exemption = None;
    finding.text.exempters = None;
    record(policy, severity, finding, verdict);
}

/// The parts a rule wrote (the engine adds location, exemption and source), taken out of
/// the violation: a finding is made once per violation, so its parts are moved, not copied.
fn text_of(v: &mut crate::rules::Violation) -> Text {
    Text {
        location: None,
        field_line: None,
        within: None,
        what: std::mem::take(&mut v.what),
        fix: std::mem::take(&mut v.fix),
        why: std::mem::take(&mut v.why),
        unseen_overlay: v.unseen_overlay.take(),
        notes: std::mem::take(&mut v.notes),
        exemption: None,
        exempters: None,
        source: String::new(),
    }
}

/// An object with only the subject's kind, name and namespace: what a DELETE review without
/// `oldObject` says about the object.
fn named_object(subject: &Subject<'_>) -> DynamicObject {
    let resource = kube::core::ApiResource::from_gvk(subject.kind);
    let object = DynamicObject::new(subject.name.as_str(), &resource);
    match &subject.namespace {
        Some(ns) if !ns.is_empty() => object.within(ns.as_str()),
        _ => object,
    }
}

#[cfg(test)]
mod tests {
    //! The engine's own caps ([`MAX_FINDINGS_PER_LIST`], [`MAX_MESSAGE_BYTES`]) at the limit
    //! and one past it. `tests/hostile_rules.rs` shows the cap through `/validate`.

    use super::*;
    use crate::short_text::ShortText;

    fn finding(policy: &str, rule: &str, i: usize) -> Finding {
        Finding {
            policy: policy.to_owned(),
            rule: RuleId::parse(rule).expect("a registered family"),
            code: "test-code",
            anchor: Anchor::Field {
                pointer: format!("/data/{i}"),
            },
            subject: Arc::new(ObjectRef {
                kind: ShortText::name("ConfigMap"),
                namespace: Some(ShortText::name("tenant")),
                name: ShortText::name("hostile"),
            }),
            text: Text {
                what: format!("finding {i}"),
                ..Text::default()
            },
            fixed_by_patch: false,
        }
    }

    fn rule(n: usize) -> &'static str {
        crate::rules::FAMILIES[n].id.as_str()
    }

    #[test]
    fn twenty_findings_stay_as_they_are() {
        let mut verdict = Verdict {
            denials: (0..MAX_FINDINGS_PER_LIST)
                .map(|i| finding("p", rule(0), i))
                .collect(),
            ..Verdict::default()
        };
        let before = verdict.clone();
        limit_findings(&mut verdict);
        assert_eq!(verdict, before);
        assert!(verdict.limits.is_empty());
    }

    #[test]
    fn past_twenty_one_summary_per_policy_with_its_count_and_code() {
        // 20 kept; past them 3 of policy "a", 1 of policy "b", in that order of appearance,
        // in each of the four lists.
        let findings: Vec<Finding> = (0..MAX_FINDINGS_PER_LIST)
            .map(|i| finding("a", rule(0), i))
            .chain([
                finding("a", rule(0), 20),
                finding("b", rule(1), 21),
                finding("a", rule(0), 22),
                finding("a", rule(0), 23),
            ])
            .collect();
        let mut verdict = Verdict {
            denials: findings.clone(),
            warnings: findings.clone(),
            audits: findings.clone(),
            mutations: findings.clone(),
            ..Verdict::default()
        };
        limit_findings(&mut verdict);
        for list in [
            &verdict.denials,
            &verdict.warnings,
            &verdict.audits,
            &verdict.mutations,
        ] {
            assert_eq!(list.len(), MAX_FINDINGS_PER_LIST + 2);
            assert_eq!(
                list[..MAX_FINDINGS_PER_LIST],
                findings[..MAX_FINDINGS_PER_LIST]
            );
            let (a, b) = (
                &list[MAX_FINDINGS_PER_LIST],
                &list[MAX_FINDINGS_PER_LIST + 1],
            );
            assert_eq!((a.code, b.code), (CODE_MORE, CODE_MORE));
            assert_eq!(
                (a.anchor.clone(), b.anchor.clone()),
                (Anchor::Object, Anchor::Object)
            );
            assert_eq!((a.policy.as_str(), b.policy.as_str()), ("a", "b"));
            assert_eq!((a.rule.as_str(), b.rule.as_str()), (rule(0), rule(1)));
            assert_eq!(
                a.first_line(),
                format!(
                    "… and 3 more findings of policy a (rule {}) on this object. Fix: run \
                     `stackgate check` on it to see them all.",
                    rule(0)
                )
            );
            assert_eq!(a.denial_text(), a.text.full("a", a.rule, CODE_MORE));
            assert!(
                b.denial_text().starts_with(&format!(
                    "… and 1 more finding of policy b (rule {})",
                    rule(1)
                )),
                "{}",
                b.denial_text()
            );
        }
        // The cap is reported once, for the metric.
        assert_eq!(verdict.limits, vec![Limit::Findings]);
        assert_eq!(Limit::Findings.as_str(), "findings");
    }

    #[test]
    fn messages_are_cut_at_four_kib_on_a_character_boundary() {
        let at_limit = "x".repeat(MAX_MESSAGE_BYTES);
        let mut kept = at_limit.clone();
        cut_message(&mut kept);
        assert_eq!(kept, at_limit, "at the limit: untouched");
        // One byte past it: cut to exactly the limit, ending in '…'.
        let mut long = "z".repeat(MAX_MESSAGE_BYTES + 1);
        cut_message(&mut long);
        assert_eq!(long.len(), MAX_MESSAGE_BYTES);
        assert_eq!(
            long,
            format!("{}…", "z".repeat(MAX_MESSAGE_BYTES - '…'.len_utf8()))
        );
        // 'é' is two bytes: 4093 ASCII bytes then 'é' puts a character across the cut (the
        // cut keeps MAX - 3 bytes to leave room for the three-byte '…'); the cut moves back
        // to the character's start.
        let mut across = format!("{}é{}", "x".repeat(MAX_MESSAGE_BYTES - 4), "y".repeat(100));
        cut_message(&mut across);
        assert_eq!(across, format!("{}…", "x".repeat(MAX_MESSAGE_BYTES - 4)));
    }

    #[test]
    fn rendered_texts_and_annotations_stay_within_four_kib() {
        let long = "w".repeat(3 * MAX_MESSAGE_BYTES);
        let mut hostile = finding("p", rule(0), 0);
        hostile.text.why = long.clone();
        hostile.text.notes = vec![long.clone(), long.clone()];
        let mut verdict = Verdict {
            denials: vec![hostile.clone()],
            warnings: vec![hostile],
            audit_annotations: BTreeMap::from([("p".to_owned(), long.clone())]),
            ..Verdict::default()
        };
        limit_findings(&mut verdict);
        for f in verdict.denials.iter().chain(&verdict.warnings) {
            assert!(f.text.why.len() <= MAX_MESSAGE_BYTES);
            let text = f.denial_text();
            assert_eq!(text.len(), MAX_MESSAGE_BYTES, "three long parts: cut whole");
            assert!(text.ends_with('…'));
            assert!(text.starts_with("finding 0."), "{}", &text[..40]);
        }
        assert_eq!(verdict.audit_annotations["p"].len(), MAX_MESSAGE_BYTES);
        // Cutting messages is not the findings cap.
        assert!(verdict.limits.is_empty());
    }

    #[test]
    fn an_unseen_overlay_is_the_first_note_until_a_face_merges_the_overlay() {
        let mut text = Text {
            location: Some("HelmChart kube-system/occm spec.valuesContent".to_owned()),
            field_line: Some(4),
            what: "the CCM runs with the default cluster name".to_owned(),
            fix: "set it".to_owned(),
            why: "Why.".to_owned(),
            unseen_overlay: Some("This holds unless an overlay sets it.".to_owned()),
            notes: vec!["Note: another.".to_owned()],
            ..Text::default()
        };
        let rule = RuleId::parse(rule(0)).expect("a registered family");
        assert_eq!(
            text.first_line(),
            "HelmChart kube-system/occm spec.valuesContent line 4: the CCM runs with the \
             default cluster name. Fix: set it."
        );
        assert!(
            text.one_line()
                .ends_with(" Why. This holds unless an overlay sets it. Note: another."),
            "{}",
            text.one_line()
        );
        let full = text.full("p", rule, "c");
        let lines: Vec<&str> = full.lines().collect();
        assert_eq!(
            lines[1..4],
            [
                "Why.",
                "This holds unless an overlay sets it.",
                "Note: another."
            ]
        );

        text.merged_overlay();
        assert_eq!(text.unseen_overlay, None);
        assert_eq!(text.field_line, None);
        assert_eq!(text.notes, ["Note: another."]);
        assert!(
            text.first_line()
                .starts_with("HelmChart kube-system/occm spec.valuesContent: ")
        );
        assert!(!text.one_line().contains("overlay"));
        assert!(!text.full("p", rule, "c").contains("overlay"));
    }

    #[test]
    fn an_unseen_overlay_is_cut_like_every_part() {
        let mut text = Text {
            unseen_overlay: Some("o".repeat(2 * MAX_MESSAGE_BYTES)),
            ..Text::default()
        };
        text.cut();
        assert!(
            text.unseen_overlay
                .is_some_and(|o| o.len() <= MAX_MESSAGE_BYTES)
        );
    }

    #[test]
    fn an_edit_is_noted_as_stackgate_set_section_key_value() {
        let edit = IniEdit {
            section: "LoadBalancer",
            key: "provider-requires-serial-api-calls",
            value: "true",
        };
        assert_eq!(
            edit_note(&edit),
            "stackgate set [LoadBalancer] provider-requires-serial-api-calls = true"
        );
    }

    #[test]
    fn a_rule_s_parts_become_the_finding_s_text() {
        let mut v = crate::rules::Violation {
            severity: Severity::Warn,
            code: "c",
            line: Some(3),
            pointer: Some("/spec".to_owned()),
            location: Some("HelmChart a/b".to_owned()),
            what: "what".to_owned(),
            fix: "fix".to_owned(),
            why: "why".to_owned(),
            unseen_overlay: Some("overlay".to_owned()),
            notes: vec!["note".to_owned()],
            fixed_by_edit: false,
        };
        assert_eq!(
            text_of(&mut v),
            Text {
                what: "what".to_owned(),
                fix: "fix".to_owned(),
                why: "why".to_owned(),
                unseen_overlay: Some("overlay".to_owned()),
                notes: vec!["note".to_owned()],
                ..Text::default()
            }
        );
    }

    /// A site ConfigMap whose cloud config lacks the serial setting: the serial policy finds
    /// it and edits it (a violation and a mutation note).
    fn unserialized_site(
        annotations: serde_json::Value,
    ) -> (kube::core::GroupVersionKind, DynamicObject) {
        let gvk = kube::core::GroupVersionKind::gvk("", "v1", "ConfigMap");
        let object = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config",
                         "annotations": annotations},
            "data": {"config": "[Global]\nauth-url = https://keystone.example:5000/v3\n"}
        }))
        .expect("a ConfigMap");
        (gvk, object)
    }

    const SERIAL: &str = "serial-lb-api-calls";

    /// What a finding takes from its policy: the exemption annotation, who may set it (only
    /// when not everyone may) and the source, trimmed; a mutation note takes the source only
    /// (nobody exempts a note).
    #[test]
    fn a_finding_takes_its_policy_s_exemption_and_source_and_a_mutation_note_its_source() {
        let (gvk, object) = unserialized_site(serde_json::json!({}));
        for everyone in [false, true] {
            let mut set = PolicySet::embedded().expect("the embedded policies load");
            let policy = set
                .policies
                .iter_mut()
                .find(|p| p.name == SERIAL)
                .expect("the serial policy");
            policy.source = format!("  {}\n", policy.source.trim());
            let source = policy.source.trim().to_owned();
            let rules = policy.exemptions.annotation.as_mut().expect("exemptible");
            rules.allowed_groups = vec![if everyone {
                crate::policy::EVERY_USER_GROUP.to_owned()
            } else {
                "platform".to_owned()
            }];
            rules.allowed_users = vec!["alice".to_owned()];
            let verdict = Engine::new(set).evaluate(&Subject::create(&gvk, &object));
            let (notes, found): (Vec<&Finding>, Vec<&Finding>) = verdict
                .mutations
                .iter()
                .chain(&verdict.denials)
                .chain(&verdict.warnings)
                .filter(|f| f.policy == SERIAL)
                .partition(|f| f.code == CODE_MUTATION);
            assert!(!notes.is_empty() && !found.is_empty(), "{verdict:?}");
            for f in found {
                assert_eq!(
                    f.text.exemption.as_deref(),
                    Some("stackgate.dev/exempt.serial-lb-api-calls")
                );
                let who = (!everyone).then_some("group platform or user alice");
                assert_eq!(f.text.exempters.as_deref(), who);
                assert_eq!(f.text.source, source);
            }
            for note in notes {
                assert_eq!(
                    (
                        note.text.exemption.as_deref(),
                        note.text.exempters.as_deref()
                    ),
                    (None, None)
                );
                assert_eq!(note.text.source, source);
                assert!(
                    note.text.what.starts_with("stackgate set [LoadBalancer] "),
                    "{}",
                    note.text.what
                );
                assert!(note.text.location.is_some() && note.line().is_some());
            }
        }
    }

    /// The webhook refuses an exemption annotation its requester may not set, as a finding of
    /// the policy, even of a policy that found nothing (`cluster-name` on a ConfigMap); an
    /// annotation of no policy, other annotations, or no requester (`check`) is no such
    /// finding.
    #[test]
    fn an_exemption_annotation_a_requester_may_not_set_is_refused() {
        let engine = Engine::new(PolicySet::embedded().expect("the embedded policies load"));
        let groups = vec!["developers".to_owned()];
        let refused = |annotations: serde_json::Value, user: bool| -> Vec<String> {
            let (gvk, object) = unserialized_site(annotations);
            let mut subject = Subject::create(&gvk, &object);
            if user {
                subject.requester = Requester::User {
                    username: "bob",
                    groups: &groups,
                };
            }
            let verdict = engine.evaluate(&subject);
            verdict
                .denials
                .iter()
                .chain(&verdict.warnings)
                .filter(|f| f.code == CODE_EXEMPTION_NOT_ALLOWED)
                .map(|f| f.policy.clone())
                .collect()
        };
        let exempt = serde_json::json!({"stackgate.dev/exempt.cluster-name": "tested"});
        assert_eq!(refused(exempt.clone(), true), ["cluster-name"]);
        assert_eq!(refused(exempt, false), Vec::<String>::new());
        for other in [
            serde_json::json!({}),
            serde_json::json!({"a": "b", "z": "y"}),
            serde_json::json!({"stackgate.dev/exempt.no-such-policy": "tested"}),
        ] {
            assert_eq!(refused(other, true), Vec::<String>::new());
        }
    }

    /// An object family's finding keeps the location its rule wrote; on an object a payload
    /// embeds, the location names the payload, then the rule's; a finding in a values string
    /// keeps where inside the string it is (`within`).
    #[test]
    fn findings_keep_their_rule_s_location_and_where_within_the_field() {
        let engine = Engine::new(PolicySet::embedded().expect("the embedded policies load"));
        let ccm = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: occm\n  \
                   namespace: kube-system\nspec:\n  template:\n    spec:\n      containers:\n      \
                   - name: occm\n        image: registry.k8s.io/provider-os/\
                   openstack-cloud-controller-manager:v1.30.0\n        args:\n        \
                   - --concurrent-service-syncs=4\n";
        let located = |json: serde_json::Value, policy: &str| -> Vec<Text> {
            let api = json["apiVersion"].as_str().expect("apiVersion").to_owned();
            let (group, version) = api.split_once('/').unwrap_or(("", api.as_str()));
            let gvk = kube::core::GroupVersionKind::gvk(
                group,
                version,
                json["kind"].as_str().expect("kind"),
            );
            let object: DynamicObject = serde_json::from_value(json).expect("an object");
            let verdict = engine.evaluate(&Subject::create(&gvk, &object));
            verdict
                .denials
                .iter()
                .chain(&verdict.warnings)
                .filter(|f| f.policy == policy)
                .map(|f| f.text.clone())
                .collect()
        };
        let daemonset = crate::yaml::parse_one(ccm)
            .and_then(|n| n.to_json())
            .expect("the DaemonSet parses");
        let own = located(daemonset, "ccm-concurrency");
        assert!(!own.is_empty());
        for text in &own {
            let location = text.location.as_deref().expect("a location");
            assert!(
                location.starts_with("DaemonSet kube-system/occm "),
                "{location}"
            );
        }
        let payload = located(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "crs", "namespace": "default"},
                "data": {"ccm.yaml": ccm}}),
            "ccm-concurrency",
        );
        assert_eq!(payload.len(), own.len());
        for (text, own) in payload.iter().zip(&own) {
            let location = text.location.as_deref().expect("a location");
            assert!(
                location.starts_with("ConfigMap default/crs ClusterResourceSet payload ")
                    && location.ends_with(&format!(": {}", own.location.as_deref().unwrap_or(""))),
                "{location}"
            );
        }
        let chart = located(
            serde_json::json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
                "metadata": {"name": "occm", "namespace": "kube-system"},
                "spec": {"chart": "openstack-cloud-controller-manager",
                    "valuesContent": "cloudConfig:\n  global:\n    auth-url: https://k:5000/v3\n  loadBalancer:\n    subnet-id: s\n"}}),
            SERIAL,
        );
        assert!(!chart.is_empty());
        for text in chart {
            assert!(text.within.is_some(), "{text:?}");
        }
    }
}
