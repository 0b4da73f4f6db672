//! `StackgateException`: an exception the platform team keeps apart from the object it
//! exempts (issue 37), parsed as strictly as policies and matched purely.
//!
//! This module is the model only: parsing and validating one document (from a file or the
//! cluster), its state at a given instant, and whether it covers one finding of one object.
//! No face reads exceptions yet; docs/exceptions.md is the design of how `serve`, `check`,
//! `audit` and the generated admission policies will. The clock is an argument (`now`): the
//! engine reads none, and every face passes the same instant to every exception of a run.
//!
//! What refuses a document, never reading it as "exempt everything": an unknown field (file,
//! line and column), a policy not in the set, a code its family does not have, a match without
//! kinds or namespaces, a wildcard or an empty name where a name is expected, an empty label
//! selector, a missing reason, a missing or unparsable `expires` (when required), a lifetime
//! over the maximum, and an exception outside the namespaces the chart allows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::core::ObjectMeta;
use serde::Deserialize;

use super::{API_VERSION, PolicySet};
use crate::rules::yaml_error_message;

/// The kind of an exception document.
pub const EXCEPTION_KIND: &str = "StackgateException";

/// Days before `expires` from which an active exception is reported as expiring (the
/// default of the policy param the design names).
pub const DEFAULT_WARN_DAYS: i64 = 14;

/// Where exceptions are accepted and how long they may live (the chart's settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExceptionRules {
    /// Namespaces an exception may live in (default: stackgate's own).
    pub namespaces: Vec<String>,
    /// Whether `expires` is required.
    pub expires_required: bool,
    /// The longest an exception may live: from its `creationTimestamp` (from the cluster) or
    /// from `now` (a file) to its `expires`.
    pub max_lifetime: SignedDuration,
    /// How long before `expires` an exception counts as expiring.
    pub warn_within: SignedDuration,
}

impl ExceptionRules {
    /// Exceptions in `namespace` only, `expires` required, at most `max_days` long, expiring
    /// [`DEFAULT_WARN_DAYS`] before the end.
    pub fn in_namespace(namespace: &str, max_days: i64) -> Self {
        Self {
            namespaces: vec![namespace.to_owned()],
            expires_required: true,
            max_lifetime: SignedDuration::from_hours(24 * max_days),
            warn_within: SignedDuration::from_hours(24 * DEFAULT_WARN_DAYS),
        }
    }
}

impl Default for ExceptionRules {
    /// The chart's defaults: namespace `stackgate`, `expires` required, 90 days at most,
    /// expiring [`DEFAULT_WARN_DAYS`] before the end.
    fn default() -> Self {
        Self::in_namespace(DEFAULT_NAMESPACE, DEFAULT_MAX_LIFETIME_DAYS)
    }
}

/// The namespace exceptions are accepted in when nothing else is configured (the chart's
/// release namespace by convention).
pub const DEFAULT_NAMESPACE: &str = "stackgate";

/// The longest an exception may live by default, in days.
pub const DEFAULT_MAX_LIFETIME_DAYS: i64 = 90;

/// Most exceptions one face reads (files of a `--exceptions` directory, objects of a watch):
/// past it the set is refused, so that a runaway generator cannot make every review scan an
/// unbounded list.
pub const MAX_EXCEPTIONS: usize = 1000;

/// Largest exception file read, in bytes (an exception is a few hundred bytes).
pub const MAX_EXCEPTION_FILE_BYTES: u64 = 1024 * 1024;

/// Why an exception document was refused. Every message names the document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExceptionError {
    /// Not YAML of the exception's shape (unknown field, wrong type), with line and column.
    #[error("{source_name}: {message}")]
    Parse {
        /// File name, or `StackgateException <ns>/<name>`.
        source_name: String,
        /// Parser message with line and column.
        message: String,
    },
    /// Well-formed, but not an exception stackgate may honour.
    #[error("{source_name}: {message}")]
    Invalid {
        /// File name, or `StackgateException <ns>/<name>`.
        source_name: String,
        /// What is wrong and what to write.
        message: String,
    },
    /// A file or directory of exceptions could not be read.
    #[error("{}: {message}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// What went wrong (the IO error kind, or the size cap).
        message: String,
    },
}

/// A `StackgateException` document as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Document {
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: Spec,
    /// Written by nobody stackgate trusts; read from the cluster with the rest and ignored.
    #[serde(default, rename = "status")]
    _status: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Spec {
    policy: String,
    #[serde(default)]
    codes: Vec<String>,
    #[serde(rename = "match")]
    matches: MatchSpec,
    reason: String,
    #[serde(default)]
    ticket: Option<String>,
    #[serde(default)]
    expires: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MatchSpec {
    kinds: Vec<String>,
    namespaces: Vec<String>,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    label_selector: Option<SelectorSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SelectorSpec {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<RequirementSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequirementSpec {
    key: String,
    operator: Operator,
    #[serde(default)]
    values: Vec<String>,
}

/// A label selector requirement's operator, as Kubernetes spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Operator {
    /// The label's value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: Operator,
    /// Values (`In`, `NotIn`: at least one; `Exists`, `DoesNotExist`: none).
    pub values: Vec<String>,
}

/// A validated exception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    /// Its own namespace.
    pub namespace: String,
    /// Its own name.
    pub name: String,
    /// The policy it exempts from.
    pub policy: String,
    /// The codes of the policy's family it covers (empty: all of them).
    pub codes: Vec<String>,
    /// Kinds it matches (`HelmRelease`, `Secret`).
    pub kinds: Vec<String>,
    /// Namespaces of the objects it matches.
    pub namespaces: Vec<String>,
    /// Names it matches (empty: any name the selector allows).
    pub names: Vec<String>,
    /// Label requirements, all of which must hold (`matchLabels` as `In` with one value).
    pub selector: Vec<Requirement>,
    /// Why.
    pub reason: String,
    /// The change or ticket reference.
    pub ticket: Option<String>,
    /// When it stops exempting (none only where the rules do not require one).
    pub expires: Option<Timestamp>,
}

/// What an exception does at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExceptionState {
    /// It exempts.
    Active,
    /// It exempts, and ends within the warning window.
    Expiring {
        /// Whole days left (0: less than a day).
        days_left: i64,
    },
    /// It exempts nothing any more.
    Expired,
}

impl ExceptionState {
    /// The metric label value (`stackgate_exceptions{policy,state}` in the design).
    pub fn as_str(self) -> &'static str {
        match self {
            ExceptionState::Active => "active",
            ExceptionState::Expiring { .. } => "expiring",
            ExceptionState::Expired => "expired",
        }
    }
}

/// The object a finding is about, as an exception matches it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Kind (`HelmRelease`).
    pub kind: &'a str,
    /// Namespace (None: cluster-scoped; an exception never matches those).
    pub namespace: Option<&'a str>,
    /// Name.
    pub name: &'a str,
    /// Labels.
    pub labels: Option<&'a BTreeMap<String, String>>,
}

impl Exception {
    /// Parses and validates every document of a YAML stream (`---` separated) as in
    /// [`Self::parse`]; an empty stream holds none.
    pub fn parse_all(
        source_name: &str,
        text: &str,
        set: &PolicySet,
        rules: &ExceptionRules,
        now: Timestamp,
    ) -> Result<Vec<Self>, ExceptionError> {
        let docs: Vec<Option<Document>> =
            serde_saphyr::from_multiple(text).map_err(|e| ExceptionError::Parse {
                source_name: source_name.to_owned(),
                message: yaml_error_message(&e),
            })?;
        docs.into_iter()
            .flatten()
            .map(|doc| validate(source_name, doc, set, rules, now))
            .collect()
    }

    /// Parses and validates one exception document (`source_name` names it in errors: a file
    /// name, or the object's namespace and name) against the policy set, the rules and the
    /// instant `now` (for the lifetime of a document without `creationTimestamp`).
    pub fn parse(
        source_name: &str,
        text: &str,
        set: &PolicySet,
        rules: &ExceptionRules,
        now: Timestamp,
    ) -> Result<Self, ExceptionError> {
        let doc: Document = serde_saphyr::from_str(text).map_err(|e| ExceptionError::Parse {
            source_name: source_name.to_owned(),
            message: yaml_error_message(&e),
        })?;
        validate(source_name, doc, set, rules, now)
    }

    /// Its state at `now` under `rules`' warning window.
    pub fn state(&self, now: Timestamp, rules: &ExceptionRules) -> ExceptionState {
        let Some(expires) = self.expires else {
            return ExceptionState::Active;
        };
        if now >= expires {
            return ExceptionState::Expired;
        }
        let left = now.duration_until(expires);
        if left <= rules.warn_within {
            ExceptionState::Expiring {
                days_left: left.as_secs() / 86_400,
            }
        } else {
            ExceptionState::Active
        }
    }

    /// Whether it exempts `target` from finding `code` of `policy` at `now`: never once
    /// expired, never a cluster-scoped object.
    pub fn covers(&self, policy: &str, code: &str, target: &Target<'_>, now: Timestamp) -> bool {
        !self.expired_at(now) && self.matches(policy, code, target)
    }

    /// Whether `now` is at or past its `expires`.
    pub fn expired_at(&self, now: Timestamp) -> bool {
        self.expires.is_some_and(|expires| now >= expires)
    }

    /// Whether it names `target` and finding `code` of `policy`, whatever the time: what
    /// [`Self::covers`] asks besides the clock, and what lets a face say that an expired
    /// exception would have covered a finding.
    pub fn matches(&self, policy: &str, code: &str, target: &Target<'_>) -> bool {
        if self.policy != policy {
            return false;
        }
        if !self.codes.is_empty() && !self.codes.iter().any(|c| c == code) {
            return false;
        }
        let Some(namespace) = target.namespace.filter(|ns| !ns.is_empty()) else {
            return false;
        };
        self.kinds.iter().any(|k| k == target.kind)
            && self.namespaces.iter().any(|n| n == namespace)
            && (self.names.is_empty() || self.names.iter().any(|n| n == target.name))
            && self.selector.iter().all(|r| r.holds(target.labels))
    }
}

/// The exceptions a face read, with the rules they were checked against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExceptionSet {
    /// The validated exceptions, in the order read.
    pub exceptions: Vec<Exception>,
    /// The rules (namespaces, lifetime, warning window).
    pub rules: ExceptionRules,
}

/// [`ExceptionError::Read`] for `path`.
pub fn read_error(path: &Path, message: String) -> ExceptionError {
    ExceptionError::Read {
        path: path.to_path_buf(),
        message,
    }
}

/// The exception files of `path`: the file itself, or the `*.yaml` / `*.yml` files of a
/// directory (not recursive), sorted by name.
pub fn exception_files(path: &Path) -> Result<Vec<PathBuf>, ExceptionError> {
    let meta = std::fs::metadata(path).map_err(|e| read_error(path, e.kind().to_string()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| read_error(path, e.kind().to_string()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| {
            matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The text of one exception file, refused past [`MAX_EXCEPTION_FILE_BYTES`] before it is read.
pub fn read_exception_file(file: &Path) -> Result<String, ExceptionError> {
    let size = std::fs::metadata(file)
        .map_err(|e| read_error(file, e.kind().to_string()))?
        .len();
    if size > MAX_EXCEPTION_FILE_BYTES {
        return Err(read_error(
            file,
            format!("larger than {MAX_EXCEPTION_FILE_BYTES} bytes"),
        ));
    }
    std::fs::read_to_string(file).map_err(|e| read_error(file, e.kind().to_string()))
}

impl ExceptionSet {
    /// Reads `path`, a file or a directory of `*.yaml` / `*.yml` files (not recursive,
    /// sorted by name), each a YAML stream of exceptions. Any document refused refuses the
    /// whole set: a face never runs on part of what the platform team wrote.
    pub fn load_path(
        path: &Path,
        set: &PolicySet,
        rules: ExceptionRules,
        now: Timestamp,
    ) -> Result<Self, ExceptionError> {
        let mut exceptions = Vec::new();
        for file in exception_files(path)? {
            let text = read_exception_file(&file)?;
            let name = file.display().to_string();
            exceptions.extend(Exception::parse_all(&name, &text, set, &rules, now)?);
            if exceptions.len() > MAX_EXCEPTIONS {
                return Err(read_error(
                    path,
                    format!("more than {MAX_EXCEPTIONS} exceptions; merge or remove some"),
                ));
            }
        }
        Ok(Self { exceptions, rules })
    }

    /// The set at the instant `now`: what the engine reads ([`ExceptionsAt`]).
    pub fn at(self: &Arc<Self>, now: Timestamp) -> ExceptionsAt {
        ExceptionsAt {
            set: Arc::clone(self),
            now,
        }
    }
}

/// An exception set and the instant a face judges it at (read once per review or run).
#[derive(Debug, Clone)]
pub struct ExceptionsAt {
    /// The exceptions.
    pub set: Arc<ExceptionSet>,
    /// The instant.
    pub now: Timestamp,
}

impl ExceptionsAt {
    /// The first exception that covers finding `code` of `policy` on `target` now, and its
    /// state.
    pub fn covering(
        &self,
        policy: &str,
        code: &str,
        target: &Target<'_>,
    ) -> Option<(&Exception, ExceptionState)> {
        self.set
            .exceptions
            .iter()
            .find(|e| e.covers(policy, code, target, self.now))
            .map(|e| (e, e.state(self.now, &self.set.rules)))
    }

    /// The exceptions that name finding `code` of `policy` on `target` but expired.
    pub fn expired_for<'s>(
        &'s self,
        policy: &'s str,
        code: &'s str,
        target: &'s Target<'_>,
    ) -> impl Iterator<Item = &'s Exception> + 's {
        self.set
            .exceptions
            .iter()
            .filter(move |e| e.expired_at(self.now) && e.matches(policy, code, target))
    }
}

impl Requirement {
    fn holds(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let value = labels.and_then(|l| l.get(&self.key));
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

fn validate(
    source_name: &str,
    doc: Document,
    set: &PolicySet,
    rules: &ExceptionRules,
    now: Timestamp,
) -> Result<Exception, ExceptionError> {
    let invalid = |message: String| ExceptionError::Invalid {
        source_name: source_name.to_owned(),
        message,
    };
    if doc.api_version != API_VERSION || doc.kind != EXCEPTION_KIND {
        return Err(invalid(format!(
            "apiVersion must be {API_VERSION} and kind {EXCEPTION_KIND}"
        )));
    }
    let name = doc.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(invalid("metadata.name is required".to_owned()));
    }
    let namespace = doc.metadata.namespace.clone().unwrap_or_default();
    if !rules.namespaces.contains(&namespace) {
        return Err(invalid(format!(
            "exceptions are accepted only in namespace(s) {} (the chart's exceptions.namespaces), \
             not in {:?}",
            rules.namespaces.join(", "),
            namespace
        )));
    }
    let spec = doc.spec;
    let Some(policy) = set.policies.iter().find(|p| p.name == spec.policy) else {
        return Err(invalid(format!(
            "spec.policy {:?} is not a policy of the set",
            spec.policy
        )));
    };
    let family = policy.rule.family();
    if let Some(code) = spec
        .codes
        .iter()
        .find(|c| !family.codes.contains(&c.as_str()))
    {
        return Err(invalid(format!(
            "spec.codes: {code:?} is not a code of rule {} (its codes: {})",
            policy.rule,
            family.codes.join(", ")
        )));
    }
    let m = spec.matches;
    for (field, list, required) in [
        ("kinds", &m.kinds, true),
        ("namespaces", &m.namespaces, true),
        ("names", &m.names, false),
    ] {
        if required && list.is_empty() {
            return Err(invalid(format!(
                "spec.match.{field} is required: an exception names what it exempts"
            )));
        }
        if let Some(bad) = list.iter().find(|v| v.trim().is_empty() || v.contains('*')) {
            return Err(invalid(format!(
                "spec.match.{field}: {bad:?} is not a name (no wildcards: list each one)"
            )));
        }
    }
    let selector = match m.label_selector {
        None => Vec::new(),
        Some(s) => {
            if s.match_labels.is_empty() && s.match_expressions.is_empty() {
                return Err(invalid(
                    "spec.match.labelSelector is empty, which would match every object; remove \
                     it or give matchLabels / matchExpressions"
                        .to_owned(),
                ));
            }
            let mut out: Vec<Requirement> = s
                .match_labels
                .into_iter()
                .map(|(key, value)| Requirement {
                    key,
                    operator: Operator::In,
                    values: vec![value],
                })
                .collect();
            for r in s.match_expressions {
                let needs_values = matches!(r.operator, Operator::In | Operator::NotIn);
                if needs_values == r.values.is_empty() {
                    return Err(invalid(format!(
                        "spec.match.labelSelector: {:?} {:?} {}",
                        r.key,
                        r.operator,
                        if needs_values {
                            "needs values"
                        } else {
                            "takes no values"
                        }
                    )));
                }
                out.push(Requirement {
                    key: r.key,
                    operator: r.operator,
                    values: r.values,
                });
            }
            out
        }
    };
    if spec.reason.trim().is_empty() {
        return Err(invalid("spec.reason is required".to_owned()));
    }
    let expires = match spec.expires.as_deref() {
        None if rules.expires_required => {
            return Err(invalid(
                "spec.expires is required (RFC 3339, e.g. 2026-12-31T00:00:00Z)".to_owned(),
            ));
        }
        None => None,
        Some(text) => Some(text.parse::<Timestamp>().map_err(|e| {
            invalid(format!(
                "spec.expires {text:?} is not an RFC 3339 time with an offset: {e}"
            ))
        })?),
    };
    if let Some(expires) = expires {
        let start = doc
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| t.0);
        if start.duration_until(expires) > rules.max_lifetime {
            return Err(invalid(format!(
                "spec.expires {expires} is more than the maximum lifetime ({} days, the chart's \
                 exceptions.maxLifetimeDays) after {start}",
                rules.max_lifetime.as_secs() / 86_400
            )));
        }
    }
    Ok(Exception {
        namespace,
        name,
        policy: spec.policy,
        codes: spec.codes,
        kinds: m.kinds,
        namespaces: m.namespaces,
        names: m.names,
        selector,
        reason: spec.reason.trim().to_owned(),
        ticket: spec.ticket.filter(|t| !t.trim().is_empty()),
        expires,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-28T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().unwrap()
    }

    fn rules() -> ExceptionRules {
        ExceptionRules::in_namespace("stackgate", 90)
    }

    fn doc(namespace: &str, spec: &str) -> String {
        format!(
            "apiVersion: stackgate.dev/v1alpha1\nkind: StackgateException\nmetadata:\n  name: occm-serial\n  namespace: {namespace}\nspec:\n{spec}"
        )
    }

    const SPEC: &str = "  policy: serial-lb-api-calls\n  codes: [\"false\"]\n  match:\n    kinds: [HelmRelease]\n    namespaces: [tenant-a]\n    names: [occm]\n  reason: Octavia provider fixed, CHG-42\n  ticket: CHG-42\n  expires: \"2026-12-31T00:00:00Z\"\n";

    fn parse(text: &str) -> Result<Exception, ExceptionError> {
        Exception::parse(
            "e.yaml",
            text,
            &PolicySet::embedded().unwrap(),
            &rules(),
            now(),
        )
    }

    fn err(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    fn target<'a>(
        kind: &'a str,
        namespace: Option<&'a str>,
        name: &'a str,
        labels: Option<&'a BTreeMap<String, String>>,
    ) -> Target<'a> {
        Target {
            kind,
            namespace,
            name,
            labels,
        }
    }

    #[test]
    fn a_valid_exception_covers_its_object_until_it_expires() {
        let e = parse(&doc("stackgate", SPEC)).unwrap();
        assert_eq!(e.ticket.as_deref(), Some("CHG-42"));
        let hr = target("HelmRelease", Some("tenant-a"), "occm", None);
        assert!(e.covers("serial-lb-api-calls", "false", &hr, now()));
        let end: Timestamp = "2026-12-31T00:00:00Z".parse().unwrap();
        let just_before = end - SignedDuration::from_secs(1);
        assert!(e.covers("serial-lb-api-calls", "false", &hr, just_before));
        assert!(
            !e.covers("serial-lb-api-calls", "false", &hr, end),
            "expired at expires"
        );
        // Another code, policy, kind, namespace, name; a cluster-scoped object.
        assert!(!e.covers("serial-lb-api-calls", "missing", &hr, now()));
        assert!(!e.covers("known-bad-lb-settings", "false", &hr, now()));
        for other in [
            target("Secret", Some("tenant-a"), "occm", None),
            target("HelmRelease", Some("tenant-b"), "occm", None),
            target("HelmRelease", Some("tenant-a"), "occm-2", None),
            target("HelmRelease", None, "occm", None),
            target("HelmRelease", Some(""), "occm", None),
        ] {
            assert!(
                !e.covers("serial-lb-api-calls", "false", &other, now()),
                "{other:?}"
            );
        }
    }

    #[test]
    fn its_state_follows_the_clock() {
        let e = parse(&doc("stackgate", SPEC)).unwrap();
        let at = |t: &str| e.state(t.parse().unwrap(), &rules());
        assert_eq!(at(NOW), ExceptionState::Active);
        assert_eq!(at("2026-12-16T23:59:59Z"), ExceptionState::Active);
        assert_eq!(
            at("2026-12-17T00:00:00Z"),
            ExceptionState::Expiring { days_left: 14 }
        );
        assert_eq!(
            at("2026-12-30T12:00:00Z"),
            ExceptionState::Expiring { days_left: 0 }
        );
        assert_eq!(at("2026-12-31T00:00:00Z"), ExceptionState::Expired);
        assert_eq!(at("2027-06-01T00:00:00Z").as_str(), "expired");
    }

    #[test]
    fn without_codes_every_code_of_the_policy_is_covered() {
        let e = parse(&doc(
            "stackgate",
            &SPEC.replace("  codes: [\"false\"]\n", ""),
        ))
        .unwrap();
        let hr = target("HelmRelease", Some("tenant-a"), "occm", None);
        assert!(e.covers("serial-lb-api-calls", "missing", &hr, now()));
        assert!(e.covers("serial-lb-api-calls", "false", &hr, now()));
    }

    #[test]
    fn a_label_selector_must_hold() {
        let spec = SPEC.replace(
            "    names: [occm]\n",
            "    labelSelector:\n      matchLabels: {team: a}\n      matchExpressions:\n      - {key: tier, operator: NotIn, values: [prod]}\n      - {key: frozen, operator: DoesNotExist}\n",
        );
        let e = parse(&doc("stackgate", &spec)).unwrap();
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let covers = |l: &BTreeMap<String, String>| {
            e.covers(
                "serial-lb-api-calls",
                "false",
                &target("HelmRelease", Some("tenant-a"), "any", Some(l)),
                now(),
            )
        };
        assert!(covers(&labels(&[("team", "a")])));
        assert!(covers(&labels(&[("team", "a"), ("tier", "dev")])));
        assert!(!covers(&labels(&[("team", "a"), ("tier", "prod")])));
        assert!(!covers(&labels(&[("team", "a"), ("frozen", "")])));
        assert!(!covers(&labels(&[("team", "b")])));
        assert!(!covers(&labels(&[])));
        assert!(!e.covers(
            "serial-lb-api-calls",
            "false",
            &target("HelmRelease", Some("tenant-a"), "any", None),
            now()
        ));
    }

    #[test]
    fn malformed_exceptions_are_refused_never_read_as_everything() {
        let cases: Vec<(String, &str)> = vec![
            (doc("stackgate", &format!("{SPEC}  extra: 1\n")), "unknown field `extra`"),
            (
                doc("stackgate", &SPEC.replace("    kinds:", "    kind:")),
                "unknown field `kind`",
            ),
            (
                doc("stackgate", &SPEC.replace("[HelmRelease]", "[]")),
                "spec.match.kinds is required",
            ),
            (
                doc("stackgate", &SPEC.replace("[tenant-a]", "[\"*\"]")),
                "no wildcards",
            ),
            (
                doc("stackgate", &SPEC.replace("names: [occm]", "names: [\"\"]")),
                "is not a name",
            ),
            (
                doc("stackgate", &SPEC.replace("    names: [occm]\n", "    labelSelector: {}\n")),
                "labelSelector is empty",
            ),
            (
                doc(
                    "stackgate",
                    &SPEC.replace(
                        "    names: [occm]\n",
                        "    labelSelector:\n      matchExpressions: [{key: a, operator: In}]\n",
                    ),
                ),
                "needs values",
            ),
            (
                doc(
                    "stackgate",
                    &SPEC.replace(
                        "    names: [occm]\n",
                        "    labelSelector:\n      matchExpressions: [{key: a, operator: Matches, values: [x]}]\n",
                    ),
                ),
                "unknown variant `Matches`",
            ),
            (
                doc("stackgate", &SPEC.replace("serial-lb-api-calls", "no-such-policy")),
                "not a policy of the set",
            ),
            (
                doc("stackgate", &SPEC.replace("[\"false\"]", "[nope]")),
                "\"nope\" is not a code of rule serial-lb-api-calls",
            ),
            (
                doc("stackgate", &SPEC.replace("Octavia provider fixed, CHG-42", "\" \"")),
                "spec.reason is required",
            ),
            (
                doc("stackgate", &SPEC.replace("  expires: \"2026-12-31T00:00:00Z\"\n", "")),
                "spec.expires is required",
            ),
            (
                doc("stackgate", &SPEC.replace("2026-12-31T00:00:00Z", "2026-12-31")),
                "not an RFC 3339 time",
            ),
            (
                doc("stackgate", &SPEC.replace("2026-12-31T00:00:00Z", "2027-03-01T00:00:00Z")),
                "more than the maximum lifetime (90 days",
            ),
            (doc("tenant-a", SPEC), "accepted only in namespace(s) stackgate"),
            (
                doc("stackgate", SPEC).replace("StackgateException", "PolicyException"),
                "kind StackgateException",
            ),
        ];
        for (text, needle) in cases {
            let e = err(&text);
            assert!(e.starts_with("e.yaml: "), "{e}");
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }

    #[test]
    fn the_lifetime_counts_from_the_creation_timestamp_when_there_is_one() {
        let text = doc("stackgate", SPEC).replace(
            "  namespace: stackgate\n",
            "  namespace: stackgate\n  creationTimestamp: \"2026-09-01T00:00:00Z\"\n  uid: u-1\n  resourceVersion: \"7\"\n",
        );
        let e = err(&text);
        assert!(e.contains("after 2026-09-01T00:00:00Z"), "{e}");
        // From the cluster, with a status nobody trusts: read, and the status ignored.
        let ok = doc("stackgate", SPEC).replace(
            "  namespace: stackgate\n",
            "  namespace: stackgate\n  creationTimestamp: \"2026-11-27T00:00:00Z\"\n",
        ) + "status: {anything: true}\n";
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn optional_expiry_where_the_rules_allow_it() {
        let mut rules = rules();
        rules.expires_required = false;
        let text = doc(
            "stackgate",
            &SPEC.replace("  expires: \"2026-12-31T00:00:00Z\"\n", ""),
        );
        let e = Exception::parse(
            "e.yaml",
            &text,
            &PolicySet::embedded().unwrap(),
            &rules,
            now(),
        )
        .unwrap();
        assert_eq!(e.state(now(), &rules), ExceptionState::Active);
        assert!(e.covers(
            "serial-lb-api-calls",
            "false",
            &target("HelmRelease", Some("tenant-a"), "occm", None),
            now()
        ));
    }
}
