//! The policy model: what each rule family does, in which mode, where, and how it may be
//! exempted. Policies are YAML documents under `policies/`; the default set is embedded in
//! the binary and a directory given with `--policies` replaces it.
//!
//! Parsing is strict: unknown fields, unknown rules and unknown modes are errors that name
//! the file, line and column.

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

/// How a policy may be exempted on a single object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Exemption {
    /// Whether an exemption annotation is honoured at all.
    pub allowed: bool,
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
    /// Exemption setting (absent: not exemptable).
    #[serde(default)]
    pub exemption: Option<Exemption>,
}

impl Policy {
    /// The annotation that exempts an object from this policy, when exemptions are allowed.
    pub fn exemption_annotation(&self) -> Option<String> {
        match &self.exemption {
            Some(Exemption { allowed: true }) => {
                Some(format!("{EXEMPT_ANNOTATION_PREFIX}{}", self.name))
            }
            _ => None,
        }
    }
}

/// `params` of a policy that sets none: an empty mapping (`stackgate policies` prints it).
fn no_params() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}
