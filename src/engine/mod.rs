//! The engine: policy selection and verdict assembly.
//!
//! Invariant: `evaluate` is pure. Its inputs are the request, the policy set and (later) the
//! release-catalog snapshot; it does no IO, reads no clock and touches no globals. The same
//! input gives the same verdict, which is what lets the webhook and `stackgate check` agree.

use std::collections::BTreeMap;
use std::sync::Arc;

use json_patch::PatchOperation;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};

use crate::budget::{Cancel, Exhausted};
use crate::cloudconf::Document;
use crate::policy::{Mode, Policy, PolicySet, RuleId};
use crate::releases::Snapshot;
use crate::rules::lb_guard::GuardFacts;
use crate::rules::{self, ConfigView, IniEdit, ObjectOutput, RuleOutput, Severity, Unreadable};
use crate::sites::{self, FoundConfig, SiteError};

/// The rule families that read cloud configs, in evaluation order.
const CLOUD_CONFIG_RULES: &[RuleId] = &[
    RuleId::CloudConfigIntegrity,
    RuleId::SerialLbApiCalls,
    RuleId::KnownBadLbSettings,
    RuleId::CredentialPlacement,
];

/// A finding attributed to a policy, ready to show to a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Policy name.
    pub policy: String,
    /// Rule family.
    pub rule: RuleId,
    /// Line in the cloud config, when there is one.
    pub line: Option<usize>,
    /// JSON pointer to the field the finding is about (e.g. `/data/config`), when known.
    pub pointer: Option<String>,
    /// The full message: what, where, why, how to fix or exempt, and the source.
    pub message: String,
    /// Whether the verdict's patch fixes it. The validating webhook still reports it: by the
    /// time it runs, a missing fix means the mutation did not happen.
    pub fixed_by_patch: bool,
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

/// Facts an IO adapter gathered for one request before evaluation. The engine only reads
/// them, so evaluation stays pure: the same request and facts give the same verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// control-plane-lb-guard: the state of the Machine's API load balancer. `None` when the
    /// guard did not run (it is off, or the request is not a control-plane Machine DELETE);
    /// the rule then does nothing.
    pub lb_guard: Option<GuardFacts>,
}

/// The policy engine. Cheap to clone and share; rebuilt when policies or the release
/// catalog change.
#[derive(Debug, Clone)]
pub struct Engine {
    policies: Arc<PolicySet>,
    releases: Arc<Snapshot>,
}

/// What a policy found, before its mode and exemptions are applied.
struct Raw<'a> {
    severity: Severity,
    line: Option<usize>,
    pointer: Option<String>,
    message: &'a str,
    fixed_by_patch: bool,
}

impl Engine {
    /// An engine over a validated policy set.
    pub fn new(policies: PolicySet) -> Self {
        Self::with_releases(policies, Arc::new(Snapshot::empty()))
    }

    /// An engine over a policy set and a snapshot of the live `OpenStackVersion`s.
    pub fn with_releases(policies: PolicySet, releases: Arc<Snapshot>) -> Self {
        Self {
            policies: Arc::new(policies),
            releases,
        }
    }

    /// The same policies over a new release snapshot (what the watcher's sink stores).
    #[must_use]
    pub fn with_release_snapshot(&self, releases: Arc<Snapshot>) -> Self {
        Self {
            policies: Arc::clone(&self.policies),
            releases,
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

    /// Evaluates one admission request (no gathered facts).
    pub fn evaluate(&self, req: &AdmissionRequest<DynamicObject>) -> Verdict {
        self.evaluate_with(req, &Facts::default())
    }

    /// Evaluates one admission request with the facts an adapter gathered for it.
    pub fn evaluate_with(&self, req: &AdmissionRequest<DynamicObject>, facts: &Facts) -> Verdict {
        // A flag that never fires cannot stop the evaluation: the default is never used.
        self.evaluate_within(req, facts, &Cancel::never())
            .unwrap_or_default()
    }

    /// [`Self::evaluate_with`] that stops with [`Exhausted`] once `cancel` fires (the adapter
    /// fires it when the request deadline passes). The flag is looked at between sites and
    /// between policies; a partial verdict is never returned.
    pub fn evaluate_within(
        &self,
        req: &AdmissionRequest<DynamicObject>,
        facts: &Facts,
        cancel: &Cancel,
    ) -> Result<Verdict, Exhausted> {
        let mut verdict = Verdict::default();
        if matches!(req.operation, Operation::Delete) {
            if let Some(lb) = &facts.lb_guard {
                self.evaluate_lb_guard(req, lb, &mut verdict);
            }
            return Ok(verdict);
        }
        // DELETE and CONNECT are admitted; subresource writes (status, scale) cannot change
        // what the rules read.
        if !matches!(req.operation, Operation::Create | Operation::Update)
            || req.sub_resource.is_some()
        {
            return Ok(verdict);
        }
        let Some(object) = req.object.as_ref() else {
            return Ok(verdict);
        };
        let namespace = req
            .namespace
            .as_deref()
            .or(object.metadata.namespace.as_deref());
        for site in sites::find(&req.kind, object, &self.policies.sites) {
            cancel.check()?;
            self.evaluate_site(&site, object, namespace, &mut verdict);
        }
        for policy in self.policies.policies.iter() {
            if policy.mode == Mode::Off
                || CLOUD_CONFIG_RULES.contains(&policy.rule)
                || !policy.scope.covers(namespace)
            {
                continue;
            }
            cancel.check()?;
            let output = run_object_rule(&self.policies, &self.releases, policy, req, object);
            self.record_object(policy, object, output, &mut verdict);
        }
        cancel.check()?;
        limit_findings(&mut verdict);
        Ok(verdict)
    }

    /// control-plane-lb-guard on a DELETE: the Machine is the request's `oldObject`.
    fn evaluate_lb_guard(
        &self,
        req: &AdmissionRequest<DynamicObject>,
        facts: &GuardFacts,
        verdict: &mut Verdict,
    ) {
        let Some(machine) = req.old_object.as_ref() else {
            return;
        };
        let namespace = req
            .namespace
            .as_deref()
            .or(machine.metadata.namespace.as_deref());
        for policy in self.policies.for_rule(RuleId::ControlPlaneLbGuard) {
            if !policy.scope.covers(namespace) {
                continue;
            }
            let unknown = policy.params.unknown.unwrap_or_default();
            let output = rules::lb_guard::check(&req.kind, machine, facts, unknown);
            self.record_object(policy, machine, output, verdict);
        }
    }

    fn record_object(
        &self,
        policy: &Policy,
        object: &DynamicObject,
        output: ObjectOutput,
        verdict: &mut Verdict,
    ) {
        if output.violations.is_empty() && output.patch.is_empty() {
            return;
        }
        if exempted(policy, object, verdict) {
            return;
        }
        let applies = matches!(policy.mode, Mode::Enforce | Mode::Warn);
        for v in &output.violations {
            let message = compose(policy, &v.message);
            record(
                policy,
                Raw {
                    severity: v.severity,
                    line: None,
                    pointer: v.pointer.clone(),
                    message: &message,
                    fixed_by_patch: applies && v.fixed_by_edit && !output.patch.is_empty(),
                },
                verdict,
            );
        }
        if applies {
            for m in output.mutations {
                verdict.mutations.push(Finding {
                    policy: policy.name.clone(),
                    rule: policy.rule,
                    line: None,
                    pointer: m.pointer,
                    message: format!("{} (policy {})", m.message, policy.name),
                    fixed_by_patch: true,
                });
            }
            // Two policies of one family may both create a missing parent (e.g. an empty
            // `metadata.annotations`); applying that twice would drop the first one's keys.
            for op in output.patch {
                if !verdict.patch.contains(&op) {
                    verdict.patch.push(op);
                }
            }
        }
    }

    fn evaluate_site(
        &self,
        site: &FoundConfig,
        object: &DynamicObject,
        namespace: Option<&str>,
        verdict: &mut Verdict,
    ) {
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
            Err(SiteError::Yaml { error, .. }) => (error.limit.map(Limit::Yaml), None),
            _ => (None, None),
        };
        if let Some(limit) = limit {
            verdict.reached(limit);
        }
        if let Some(what) = oversized {
            self.evaluate_oversized_site(site, &what, object, namespace, verdict);
            return;
        }
        let parsed = site.text.as_ref().map(|text| Document::parse(text));
        let doc_view: Result<&Document, Unreadable<'_>> = match &parsed {
            Err(e) => Err(Unreadable::Site(e)),
            Ok(Err(e)) => Err(Unreadable::Parse(e)),
            Ok(Ok(doc)) => Ok(doc),
        };
        let view = ConfigView {
            doc: doc_view,
            secret: site.secret,
            configmap: site.is_configmap(),
        };
        let mut edited: Option<(Document, Vec<IniEdit>)> = None;
        let mut reported_unreadable = false;
        for &rule in CLOUD_CONFIG_RULES {
            for policy in self.policies.for_rule(rule) {
                if !policy.scope.covers(namespace) {
                    continue;
                }
                if view.doc.is_err() && reported_unreadable {
                    // An unreadable config is reported once, by the first family that ran
                    // (integrity, when it is on).
                    continue;
                }
                let output = run_config_rule(rule, &view);
                if output.violations.is_empty() && output.edits.is_empty() {
                    continue;
                }
                reported_unreadable = view.doc.is_err();
                if exempted(policy, object, verdict) {
                    continue;
                }
                // An edit that will be applied fixes the violations the rule marks as such.
                let edits_apply = matches!(policy.mode, Mode::Enforce | Mode::Warn)
                    && site.mutable
                    && view.doc.is_ok()
                    && !output.edits.is_empty();
                for v in &output.violations {
                    let mut message = format!("{}: {}.", site.describe(v.line), v.message);
                    if !site.mutable
                        && let Some(note) = &site.note
                    {
                        message.push_str(&format!(" Note: this object is validated only: {note}."));
                    }
                    let message = compose(policy, &message);
                    record(
                        policy,
                        Raw {
                            severity: v.severity,
                            line: v.line,
                            pointer: Some(site.pointer()),
                            message: &message,
                            fixed_by_patch: edits_apply && v.fixed_by_edit,
                        },
                        verdict,
                    );
                }
                if edits_apply && let Ok(doc) = &view.doc {
                    for edit in &output.edits {
                        let (target, applied) =
                            edited.get_or_insert_with(|| ((*doc).clone(), Vec::new()));
                        let summary = target.set(edit.section, edit.key, edit.value);
                        applied.push(edit.clone());
                        verdict.mutations.push(Finding {
                            policy: policy.name.clone(),
                            rule,
                            line: Some(summary.line),
                            pointer: Some(site.pointer()),
                            fixed_by_patch: true,
                            message: format!(
                                "stackgate set [{}] {} = {} in {} (policy {})",
                                edit.section,
                                edit.key,
                                edit.value,
                                site.describe(Some(summary.line)),
                                policy.name
                            ),
                        });
                    }
                }
            }
        }
        if let Some((doc, applied)) = edited {
            verdict.patch.extend(site.patch(&doc, &applied));
        }
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
        for f in list.iter_mut() {
            cut_message(&mut f.message);
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
            list.push(Finding {
                line: None,
                message: format!(
                    "… and {n} more finding{} of policy {} (rule {}) on this object; run \
                     `stackgate check` on it to see them all",
                    if n == 1 { "" } else { "s" },
                    first.policy,
                    first.rule.as_str()
                ),
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
    /// A cloud config over [`MAX_CLOUD_CONFIG_BYTES`], or Helm values over
    /// [`crate::sites::helm::MAX_VALUES_TEXT_BYTES`]: not parsed; the first cloud-config
    /// policy that covers the namespace reports it (deny in enforce mode, like an unreadable
    /// config), and no edit is made.
    fn evaluate_oversized_site(
        &self,
        site: &FoundConfig,
        what: &str,
        object: &DynamicObject,
        namespace: Option<&str>,
        verdict: &mut Verdict,
    ) {
        let Some(policy) = CLOUD_CONFIG_RULES
            .iter()
            .flat_map(|&rule| self.policies.for_rule(rule))
            .find(|p| p.scope.covers(namespace))
        else {
            return;
        };
        if exempted(policy, object, verdict) {
            return;
        }
        let message = compose(
            policy,
            &format!(
                "{}: {what}, so stackgate cannot check it. A CCM cloud config and the CCM \
                 chart's values are a few KiB: remove what does not belong there",
                site.describe(None)
            ),
        );
        record(
            policy,
            Raw {
                severity: Severity::Deny,
                line: None,
                pointer: Some(site.pointer()),
                message: &message,
                fixed_by_patch: false,
            },
            verdict,
        );
    }
}

/// Applies the policy mode to one finding.
fn record(policy: &Policy, raw: Raw<'_>, verdict: &mut Verdict) {
    let finding = Finding {
        policy: policy.name.clone(),
        rule: policy.rule,
        line: raw.line,
        pointer: raw.pointer,
        message: raw.message.to_owned(),
        fixed_by_patch: raw.fixed_by_patch,
    };
    match (policy.mode, raw.severity) {
        (Mode::Enforce, Severity::Deny) => verdict.denials.push(finding),
        (Mode::Enforce | Mode::Warn, _) => verdict.warnings.push(finding),
        (Mode::Audit, _) => {
            verdict
                .audit_annotations
                .entry(format!("{}-finding", policy.name))
                .or_insert_with(|| finding.message.clone());
            verdict.audits.push(finding);
        }
        (Mode::Off, _) => {}
    }
}

/// Records an exemption and returns true when `object` carries one for `policy`.
fn exempted(policy: &Policy, object: &DynamicObject, verdict: &mut Verdict) -> bool {
    let Some(reason) = exemption_reason(policy, object) else {
        return false;
    };
    verdict
        .audit_annotations
        .insert(format!("{}-exempted", policy.name), reason.clone());
    if !verdict.exemptions.iter().any(|e| e.policy == policy.name) {
        verdict.exemptions.push(Exempted {
            policy: policy.name.clone(),
            rule: policy.rule,
            reason,
        });
    }
    true
}

fn run_config_rule(rule: RuleId, view: &ConfigView<'_>) -> RuleOutput {
    match rule {
        RuleId::SerialLbApiCalls => rules::serial::check(view),
        RuleId::CloudConfigIntegrity => rules::integrity::check(view),
        RuleId::KnownBadLbSettings => rules::known_bad::check(view),
        RuleId::CredentialPlacement => rules::credentials::check(view),
        RuleId::CcmConcurrency | RuleId::ReleaseAnnotations | RuleId::ControlPlaneLbGuard => {
            RuleOutput::default()
        }
    }
}

fn run_object_rule(
    policies: &PolicySet,
    releases: &Snapshot,
    policy: &Policy,
    req: &AdmissionRequest<DynamicObject>,
    object: &DynamicObject,
) -> ObjectOutput {
    match policy.rule {
        RuleId::CcmConcurrency => {
            rules::concurrency::check(&req.kind, object, &policy.params, policies)
        }
        RuleId::ReleaseAnnotations => {
            rules::release_annotations::check(policy, &policies.releases, releases, req, object)
        }
        // Cloud-config families run per site in `evaluate_site`.
        RuleId::SerialLbApiCalls
        | RuleId::CloudConfigIntegrity
        | RuleId::KnownBadLbSettings
        | RuleId::CredentialPlacement
        | RuleId::ControlPlaneLbGuard => ObjectOutput::default(),
    }
}

/// The exemption reason on `object` for `policy`, when the policy allows exemptions and the
/// annotation carries a non-empty reason.
fn exemption_reason(policy: &Policy, object: &DynamicObject) -> Option<String> {
    let key = policy.exemption_annotation()?;
    let reason = object.metadata.annotations.as_ref()?.get(&key)?.trim();
    (!reason.is_empty()).then(|| reason.to_owned())
}

/// Appends the exemption hint and the source to a located message.
fn compose(policy: &Policy, located: &str) -> String {
    let mut out = located.trim_end().to_owned();
    if !out.ends_with('.') {
        out.push('.');
    }
    if let Some(key) = policy.exemption_annotation() {
        out.push_str(&format!(
            " To exempt this object, annotate it with {key}=\"<reason>\"."
        ));
    }
    out.push_str(&attribution_start(&policy.name, policy.rule));
    out.push_str(policy.source.trim());
    out.push(')');
    out
}

/// How the attribution [`compose`] appends to a policy's message begins:
/// ` (policy NAME, rule RULE; source: ` (the source and `)` follow). Shorter renderings of a
/// message (kubectl warnings) find it with this.
pub(crate) fn attribution_start(policy: &str, rule: RuleId) -> String {
    format!(" (policy {policy}, rule {}; source: ", rule.as_str())
}
