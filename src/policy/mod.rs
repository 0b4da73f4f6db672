//! The policy model: what each rule family does, in which mode, where, and how it may be
//! exempted. Policies are YAML documents under `policies/`; the default set is embedded in
//! the binary and a directory given with `--policies` replaces it.
//!
//! Parsing is strict: unknown fields, unknown rules and unknown modes are errors that name
//! the file, line and column.

pub mod exception;
mod load;

pub use crate::rules::RuleId;
pub use crate::sites::{SiteKind, SiteSpec, SitesDocument};
pub use load::{PolicyError, PolicySet};

use serde::{Deserialize, Serialize};

use crate::rules::Params;

/// API version every policy document carries.
pub const API_VERSION: &str = "stackgate.dev/v1alpha1";

/// Annotation prefix for exemptions: `stackgate.dev/exempt.<policy-name>: <reason>`.
pub const EXEMPT_ANNOTATION_PREFIX: &str = "stackgate.dev/exempt.";

/// What a policy does when its rule finds something.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Mutate, and deny what the rule forbids.
    Enforce,
    /// Mutate, and turn denials into warnings that kubectl prints.
    Warn,
    /// Record only: no mutation, no denial; the finding goes to an audit annotation,
    /// a log line and a metric.
    Audit,
    /// The rule does not run.
    Off,
}

impl Mode {
    /// Lowercase name, as written in policy files and used as a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Warn => "warn",
            Mode::Audit => "audit",
            Mode::Off => "off",
        }
    }
}

/// Which requests a policy applies to, beyond what its rule family selects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Match {
    /// Only these namespaces (empty: all).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Never these namespaces.
    #[serde(default)]
    pub exclude_namespaces: Vec<String>,
}

impl Match {
    /// Whether an object in `namespace` (None for cluster-scoped) is in scope.
    pub fn covers(&self, namespace: Option<&str>) -> bool {
        let ns = namespace.unwrap_or("");
        if self.exclude_namespaces.iter().any(|n| n == ns) {
            return false;
        }
        self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == ns)
    }
}

/// The group every authenticated Kubernetes user is in: listing it in
/// [`AnnotationExemption::allowed_groups`] lets anyone who may write the object exempt it.
pub const EVERY_USER_GROUP: &str = "system:authenticated";

/// How a policy may be exempted (`exemptions:`). Without `annotation` the per-object
/// annotation exempts nothing: exceptions are then the platform team's alone (the default,
/// and what an `enforce` policy should keep unless a group is named).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Exemptions {
    /// Who may exempt one object with the annotation `stackgate.dev/exempt.<policy>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation: Option<AnnotationExemption>,
}

/// Who may exempt an object with its annotation. The webhook counts the annotation only when
/// the review's requester is listed (by username or one of its groups), or on an UPDATE or
/// DELETE when the stored object already carries the same annotation with the same value (a
/// listed user set it; a tenant's later edits keep it). `check` and `audit` have no
/// requester: [`Unverified`] says what they do.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AnnotationExemption {
    /// Groups whose members' annotation counts (e.g. the platform team's group;
    /// [`EVERY_USER_GROUP`] for anyone).
    #[serde(default)]
    pub allowed_groups: Vec<String>,
    /// Usernames whose annotation counts (`system:serviceaccount:<ns>:<name>` for a
    /// controller).
    #[serde(default)]
    pub allowed_users: Vec<String>,
    /// What `check` and `audit` do with an annotation whose author they cannot know; absent:
    /// [`Unverified::Honour`] when anyone may exempt (nothing to verify), else
    /// [`Unverified::Apply`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unverified: Option<Unverified>,
}

impl AnnotationExemption {
    /// Whether an annotation written by `username` (in `groups`) counts.
    pub fn allows(&self, username: &str, groups: &[String]) -> bool {
        self.allowed_users.iter().any(|u| u == username)
            || self
                .allowed_groups
                .iter()
                .any(|g| groups.iter().any(|have| have == g))
    }

    /// Whether every authenticated user may exempt ([`EVERY_USER_GROUP`] is listed).
    pub fn open_to_everyone(&self) -> bool {
        self.allowed_groups.iter().any(|g| g == EVERY_USER_GROUP)
    }

    /// What a face without a requester does with the annotation (the default resolved).
    pub fn unverified(&self) -> Unverified {
        self.unverified.unwrap_or(if self.open_to_everyone() {
            Unverified::Honour
        } else {
            Unverified::Apply
        })
    }

    /// Who may exempt, for messages: `group platform-team or user alice`.
    pub fn who(&self) -> String {
        let groups = self.allowed_groups.iter().map(|g| format!("group {g}"));
        let users = self.allowed_users.iter().map(|u| format!("user {u}"));
        groups.chain(users).collect::<Vec<_>>().join(" or ")
    }
}

/// What `check` and `audit`, which cannot know who wrote an object, do with its exemption
/// annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unverified {
    /// The policy applies as if the annotation were absent, and the annotation is reported as
    /// unverified and not applied: a file or stored object whose annotation a tenant wrote
    /// must not pass CI or audit when the webhook would refuse it.
    Apply,
    /// The annotation exempts, reported as an unverified exemption.
    Honour,
}

/// One policy: a rule family, a mode, a scope, and its exemption setting.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Policy {
    /// Always [`API_VERSION`].
    pub api_version: String,
    /// Always `Policy`.
    pub kind: String,
    /// Unique name; used in messages, metrics and the exemption annotation.
    pub name: String,
    /// The rule family.
    pub rule: RuleId,
    /// What happens on a finding.
    pub mode: Mode,
    /// What the policy prevents, for humans.
    pub description: String,
    /// The upstream fact the rule rests on (issue, doc, code reference).
    pub source: String,
    /// Scope.
    #[serde(default, rename = "match")]
    pub scope: Match,
    /// Rule parameters as written; the family parses them at load time into
    /// [`Policy::params`] (see [`crate::rules::Family::parse_params`]).
    #[serde(default = "no_params", rename = "params")]
    pub raw_params: serde_json::Value,
    /// The parameters as the family parsed them.
    #[serde(skip)]
    pub params: Params,
    /// How the policy may be exempted (absent: the annotation exempts nothing).
    #[serde(default)]
    pub exemptions: Exemptions,
    /// The former `exemption: {allowed: …}`, refused at load time with what to write instead
    /// (it let anyone who may write an object exempt it).
    #[serde(default, rename = "exemption", skip_serializing)]
    pub legacy_exemption: Option<serde_json::Value>,
}

impl Policy {
    /// The annotation that exempts an object from this policy, when the policy lets some
    /// requester exempt with it ([`Exemptions::annotation`]).
    pub fn exemption_annotation(&self) -> Option<String> {
        self.exemptions
            .annotation
            .as_ref()
            .map(|_| format!("{EXEMPT_ANNOTATION_PREFIX}{}", self.name))
    }
}

/// `params` of a policy that sets none: an empty mapping (`stackgate policies` prints it).
fn no_params() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}
