//! Kubernetes admission policies generated from the effective policy set: the part of
//! stackgate that runs inside the apiserver, with no stackgate pod in the path.
//!
//! [`generate`] turns a [`PolicySet`] (its policies and its sites document) into
//! `ValidatingAdmissionPolicy` objects and their bindings and, for a Kubernetes version that
//! serves them, `MutatingAdmissionPolicy` objects and theirs. They decide a subset of what
//! the webhook decides, written in CEL (the apiserver's expression language):
//!
//! * an explicit false for `[LoadBalancer] provider-requires-serial-api-calls` (policies of
//!   the `serial-lb-api-calls` rule) and `[LoadBalancer] use-octavia` (policies of the
//!   `known-bad-lb-settings` rule), in the cloud config of a named or labelled **ConfigMap**
//!   site, and in the structured values of the `openstack-cloud-controller-manager` chart in a
//!   Flux `HelmRelease` (`spec.values`) or an Argo CD `Application` (`helm.valuesObject`,
//!   `cloudConfig.loadBalancer`, the exact JSON path);
//! * the missing serial setting added (mutating policies) to such a ConfigMap config and to
//!   such `HelmRelease` and `Application` (`spec.source`) values.
//!
//! The rule they must keep: **never deny or rewrite what the webhook admits unchanged**.
//! gcfg is not a regular language, so a ConfigMap config is decided only when it passes the
//! *plain INI gate* ([`PLAIN_INI_GATE`]), a text CEL can read exactly; anything else is left
//! to the webhook. Structured values are decided only when every key the chart renders is a
//! plain gcfg name and every value a plain scalar (no line can be injected through a key),
//! within size limits that bound their CEL cost ([`MAX_DECIDED_VALUES_ENTRIES`] and the others),
//! the Secret is rendered, no `cloudConfigContents` replaces the map, the chart reference holds
//! no `?`, `#` or `%` (the engine reads it as a URL) and no values come from elsewhere (Flux
//! `valuesFrom`, `valuesFiles`, `valuesFile`; Argo CD `valueFiles`, `parameters`). Secrets are not decided at all:
//! admission CEL on 1.34 and 1.36 has no base64 decoder. An evaluation error admits
//! (`failurePolicy: Ignore`). `docs/admission-policies.md` lists what stays webhook-only.
//!
//! Pure: no IO; the CLI prints the objects and the chart ships them (`files/`).

pub mod served;
pub mod static_manifests;

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

use crate::policy::{EXEMPT_ANNOTATION_PREFIX, Mode, Policy, PolicySet, SiteKind};
use crate::rules::{known_bad, serial};
use crate::sites::helm::DEFAULT_CHARTS;

/// Errors of the generator (the only boundary of this module).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdmissionPoliciesError {
    /// The version text is not `MAJOR.MINOR` (optionally `v`-prefixed, patch ignored).
    #[error("{0:?} is not a Kubernetes version like 1.30 or v1.36.2")]
    BadVersion(String),
    /// The version serves no ValidatingAdmissionPolicy API stackgate generates for.
    #[error(
        "Kubernetes {0} serves no ValidatingAdmissionPolicy API stackgate generates for \
         (v1beta1 from 1.28, v1 from 1.30); use the webhook"
    )]
    Unsupported(KubeVersion),
    /// Static admission manifests (KEP-5793) need Kubernetes 1.36 or later.
    #[error(
        "Kubernetes {0} has no static admission manifests (ManifestBasedAdmissionControlConfig \
         is alpha from 1.36)"
    )]
    StaticUnsupported(KubeVersion),
    /// The static manifests would be refused by the apiserver, which then does not start.
    #[error("static admission manifests the apiserver would refuse: {0}")]
    BadStaticManifest(String),
    /// The target serves no API version of a generated kind: the output would not install
    /// fully (what is missing, and how to choose a subset or describe the server).
    #[error("{0}")]
    NotServed(String),
    /// An `--api-versions` entry is not `group/version` or `group/version/Kind`.
    #[error(
        "{0:?} is not an API version like admissionregistration.k8s.io/v1 or \
         admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
    )]
    BadApiVersion(String),
}

/// A Kubernetes minor version, which decides the admission API versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeVersion {
    /// Major (1).
    pub major: u32,
    /// Minor.
    pub minor: u32,
}

/// The version `stackgate policies --output admission-policies` assumes: the first with
/// `ValidatingAdmissionPolicy` v1 (GA).
pub const DEFAULT_KUBE_VERSION: &str = "1.30";

impl FromStr for KubeVersion {
    type Err = AdmissionPoliciesError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AdmissionPoliciesError::BadVersion(s.to_owned());
        let text = s.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut parts = text.split('.');
        let major = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        // The minor may carry a suffix (`30+`, as some clusters report it).
        let minor_text = parts.next().ok_or_else(bad)?;
        let digits: String = minor_text
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        let minor = digits.parse().map_err(|_| bad())?;
        Ok(KubeVersion { major, minor })
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl KubeVersion {
    fn at_least(self, minor: u32) -> bool {
        self.major > 1 || (self.major == 1 && self.minor >= minor)
    }

    /// The `admissionregistration.k8s.io` version of ValidatingAdmissionPolicy to use.
    pub fn validating_api(self) -> Option<&'static str> {
        if self.at_least(30) {
            Some("admissionregistration.k8s.io/v1")
        } else if self.at_least(28) {
            Some("admissionregistration.k8s.io/v1beta1")
        } else {
            None
        }
    }

    /// The version of MutatingAdmissionPolicy: v1 from 1.36 (on by default), v1beta1 on 1.34
    /// and 1.35 (served only with the `MutatingAdmissionPolicy` feature gate and
    /// `--runtime-config=admissionregistration.k8s.io/v1beta1=true`).
    pub fn mutating_api(self) -> Option<&'static str> {
        if self.at_least(36) {
            Some("admissionregistration.k8s.io/v1")
        } else if self.at_least(34) {
            Some("admissionregistration.k8s.io/v1beta1")
        } else {
            None
        }
    }
}

/// The generated objects, by kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmissionPolicies {
    /// ValidatingAdmissionPolicy objects (apiVersion v1; see [`AdmissionPolicies::objects`]).
    pub validating: Vec<Value>,
    /// Their bindings.
    pub validating_bindings: Vec<Value>,
    /// MutatingAdmissionPolicy objects (apiVersion v1).
    pub mutating: Vec<Value>,
    /// Their bindings.
    pub mutating_bindings: Vec<Value>,
}

const V1: &str = "admissionregistration.k8s.io/v1";

impl AdmissionPolicies {
    /// The generated objects of `family` (policies, then bindings), without apiVersion set.
    pub fn of_family(&self, family: served::Family) -> impl Iterator<Item = &Value> {
        let (policies, bindings) = match family {
            served::Family::Validating => (&self.validating, &self.validating_bindings),
            served::Family::Mutating => (&self.mutating, &self.mutating_bindings),
        };
        policies.iter().chain(bindings)
    }

    /// Every object of the families `choice` gives an API version, with that apiVersion.
    pub fn objects_for(&self, choice: served::ApiChoice) -> Vec<Value> {
        let mut out = Vec::new();
        for family in [served::Family::Validating, served::Family::Mutating] {
            let Some(api) = choice.of(family) else {
                continue;
            };
            out.extend(self.of_family(family).map(|o| {
                let mut o = o.clone();
                o["apiVersion"] = Value::String(api.to_owned());
                o
            }));
        }
        out
    }

    /// Every object in the newest API version `version` has for its kind, switched on or not
    /// (MutatingAdmissionPolicy v1beta1 on 1.34 and 1.35): what the chart renders where
    /// discovery lists it. What a *default* server of `version` serves is
    /// [`served::ServedApis::default_server`], which the command line uses.
    pub fn objects(&self, version: KubeVersion) -> Result<Vec<Value>, AdmissionPoliciesError> {
        let validating = version
            .validating_api()
            .ok_or(AdmissionPoliciesError::Unsupported(version))?;
        Ok(self.objects_for(served::ApiChoice {
            validating: Some(validating),
            mutating: version.mutating_api(),
        }))
    }

    /// The objects of `choice` as YAML documents (JSON is YAML), with a header comment naming
    /// `target` (`Kubernetes 1.36`, what the objects were chosen for).
    pub fn to_yaml(&self, choice: served::ApiChoice, target: &str) -> String {
        let mut out = format!(
            "# stackgate admission policies for {target} (generated by `stackgate \
             policies --output admission-policies`)\n"
        );
        for o in self.objects_for(choice) {
            out.push_str("---\n");
            out.push_str(&serde_json::to_string_pretty(&o).unwrap_or_default());
            out.push('\n');
        }
        out
    }
}

/// Largest ConfigMap cloud config the policies decide, in bytes (a larger text is the
/// webhook's): at this size every expression stays under half the apiserver's per-call CEL cost
/// limit, bounded with its cost functions in `tests/admission_policies_cel.rs`. 64 KiB ran out.
pub const MAX_DECIDED_TEXT_BYTES: usize = 16_384;

/// Longest chart reference (a HelmRelease's chart or chartRef name, an Application source's
/// `chart` or `path`) the chart-values policies read: matching a longer one against the chart
/// names could run out of CEL cost; it is left to the webhook. Real references are URLs and
/// paths well under it.
pub const MAX_DECIDED_CHART_REF_BYTES: usize = 512;

/// Most entries of each map the chart-values policies read (`cloudConfig` and each of its
/// sections): every entry is matched against the gcfg name pattern, so the count bounds the
/// CEL cost; values with more are left to the webhook. The chart's largest section,
/// `loadBalancer`, has about 35 options in all.
pub const MAX_DECIDED_VALUES_ENTRIES: usize = 40;

/// Longest key of a decided `cloudConfig` section (the longest OpenStack CCM option is 34
/// bytes); a longer one leaves the values to the webhook.
pub const MAX_DECIDED_VALUES_KEY_BYTES: usize = 64;

/// Longest value (as text) of a decided `cloudConfig` section entry; a longer one leaves the
/// values to the webhook.
pub const MAX_DECIDED_VALUES_VALUE_BYTES: usize = 256;

/// Most Argo CD sources an Application may list for the policies to decide it (the engine
/// reads at most `sites::helm::MAX_CARRIERS_PER_OBJECT` values carriers).
const MAX_DECIDED_SOURCES: usize = crate::sites::helm::MAX_CARRIERS_PER_OBJECT;

/// A gcfg section or variable name as the gate admits it: an ASCII letter, then ASCII letters,
/// digits and `-` (gcfg's identifier, restricted to ASCII).
const IDENT: &str = "[A-Za-z][A-Za-z0-9-]*";

/// The plain INI gate, two regular expressions over the whole text (RE2 and Rust `regex` read
/// them alike): this one for the characters, [`gate_structure`] for the lines. A text passes
/// when:
///
/// * it holds only tab, newline and printable ASCII other than `"` and `\` (so no quotes, no
///   escapes, no continuation lines, no CR, no Unicode, hence no case-folding surprises);
/// * every line is one of: blank (spaces and tabs), a comment (`;` or `#` after optional
///   blanks), a section header `[Name]` at the start of the line (blanks allowed inside the
///   brackets, a comment after it; no subsection), or a variable `name` / `name = value`
///   (optional leading blanks; the value is anything on the line: gcfg ends it at `;` or `#`);
/// * no variable comes before the first header.
///
/// Every such text is one gcfg parses (tested against the engine's parser), with
/// `\n[` marking exactly the section headers, which is what the policies' CEL relies on.
pub const PLAIN_INI_GATE: &str = r"^[\t\n\x20\x21\x23-\x5b\x5d-\x7e]*$";

/// The structural half of the gate (lines), see [`PLAIN_INI_GATE`].
pub fn gate_structure() -> String {
    let blank_or_comment = r"[ \t]*(?:[;#][^\n]*)?";
    let header = format!(r"\[[ \t]*{IDENT}[ \t]*\][ \t]*(?:[;#][^\n]*)?");
    let variable = format!(r"[ \t]*{IDENT}[ \t]*(?:=[^\n]*)?");
    format!(
        r"^(?:{blank_or_comment}\n)*(?:{header}(?:\n(?:{header}|{variable}|{blank_or_comment}))*|{blank_or_comment})$"
    )
}

/// A section chunk (text after a `\n[` split) that is a `[LoadBalancer]` header.
const LB_CHUNK: &str = r"(?i)^[ \t]*loadbalancer[ \t]*\]";

/// Whether gated text `t` is recognisably an OpenStack CCM config, as the engine's
/// `cloudconf::schema::is_openstack_config` decides it: a section only the OpenStack CCM has,
/// or a `[Global]` key only it reads. A shared site (OpenShift's `cloud-provider-config`) is
/// edited only then. In a gated text a `[` at the start of a line is a section header, so the
/// sections are found in one pass over the whole text, and the `[Global]` key in one pass over
/// the joined `[Global]` chunks: a regular expression per chunk costs at least one unit per
/// chunk (see `configmap_mutation_variables`).
fn openstack_config_cel(t: &str) -> String {
    use crate::cloudconf::schema::{OPENSTACK_ONLY_GLOBAL_KEYS, OPENSTACK_ONLY_SECTIONS};
    let alternatives = |names: &[&str]| {
        names
            .iter()
            .map(|n| regex_escape(&n.to_ascii_lowercase()))
            .collect::<Vec<_>>()
            .join("|")
    };
    let section = format!(
        r"(?mi)^\[[ \t]*(?:{})[ \t]*\]",
        alternatives(OPENSTACK_ONLY_SECTIONS)
    );
    let global_key = format!(
        r"(?mi)^[ \t]*(?:{})[ \t]*(?:=[^\n]*)?$",
        alternatives(OPENSTACK_ONLY_GLOBAL_KEYS)
    );
    format!(
        "{t}.matches({section}) || ('\\n' + {t}).split('\\n[').filter(c, c.matches({global})).join('\\n').matches({global_key})",
        section = cel_str(&section),
        global = cel_str(r"(?i)^[ \t]*global[ \t]*\]"),
        global_key = cel_str(&global_key),
    )
}

/// The lines assigning `key` (any case), in a text of joined `[LoadBalancer]` chunks.
fn assignment_regex(key: &str) -> String {
    format!(r"(?mi)^[ \t]*{}[ \t]*(?:=[^\n]*)?$", regex_escape(key))
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// A CEL string literal for `s`: single-quoted, with every character that cannot stand for
/// itself escaped, so any text (a namespace from a policy, a key, a regular expression) reads
/// back as exactly `s`. CEL forbids a raw CR or LF inside a quoted literal and reads `\` and
/// the quote as escapes; other control characters, and the Unicode line and paragraph
/// separators, the BOM and NEL (line breaks to YAML and to editors), are written as `\u`
/// escapes so the generated manifest stays one line per expression. Every literal the
/// generated CEL holds is made here.
pub fn cel_str(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                // Controls and these separators are all in the Basic Multilingual Plane.
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The gcfg bool literals that read as false (`cloudconf::parse_bool`), lower case.
const FALSE_LITERALS: &str = "['false', 'no', 'off', '0']";

/// What a generated policy decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decided {
    /// `[LoadBalancer] provider-requires-serial-api-calls` false.
    Serial,
    /// `[LoadBalancer] use-octavia` false.
    UseOctavia,
}

impl Decided {
    fn key(self) -> &'static str {
        match self {
            Decided::Serial => serial::KEY,
            Decided::UseOctavia => "use-octavia",
        }
    }

    fn of(policy: &Policy) -> Option<Decided> {
        if policy.rule == serial::FAMILY.id {
            Some(Decided::Serial)
        } else if policy.rule == known_bad::FAMILY.id {
            Some(Decided::UseOctavia)
        } else {
            None
        }
    }

    fn message(self, policy: &Policy, carrier: &str) -> String {
        let what = match self {
            Decided::Serial => format!(
                "{carrier} sets [LoadBalancer] {} to false: without serial calls the CCM sends \
                 fully-populated load-balancer creates and batch member updates, which Octavia \
                 providers race on (409 \"immutable\", objects stuck in PENDING_*). Fix: set it \
                 to true",
                serial::KEY
            ),
            Decided::UseOctavia => format!(
                "{carrier} sets [LoadBalancer] use-octavia to false, which asks for Neutron \
                 LBaaS v2 (deprecated, leaks admin-owned resources; CCM v1.26.0 and later \
                 ignore it). Fix: delete the setting"
            ),
        };
        let exempt = match (policy.exemption_annotation(), &policy.exemptions.annotation) {
            (Some(key), Some(who)) => format!(
                " To exempt this object, have {} annotate it with {key}=\"<reason>\".",
                who.who()
            ),
            _ => String::new(),
        };
        format!(
            "stackgate policy {} (in-process admission policy): {what}.{exempt} Source: {}",
            policy.name,
            policy.source.trim()
        )
    }
}

/// Builds the admission policies of `set`: one ValidatingAdmissionPolicy per enabled policy
/// of a decided rule and carrier group (ConfigMaps; GitOps objects), and one
/// MutatingAdmissionPolicy per group for `serial-lb-api-calls` policies in enforce or warn
/// mode.
pub fn generate(set: &PolicySet) -> AdmissionPolicies {
    let mut out = AdmissionPolicies::default();
    for policy in &set.policies {
        let Some(decided) = Decided::of(policy) else {
            continue;
        };
        let actions: &[&str] = match policy.mode {
            Mode::Enforce => &["Deny"],
            Mode::Warn => &["Warn"],
            Mode::Audit => &["Audit"],
            Mode::Off => continue,
        };
        let common = common_variables(policy);
        let configmap_name = format!("stackgate-{}-configmaps", policy.name);
        let sites = configmap_site_keys(set, false);
        if let Some(sites) = sites {
            let mut variables = common.clone();
            variables.extend(configmap_variables(&sites, decided));
            let expression = format!(
                "!variables.inScope || variables.exempt || !variables.lastAssignments.exists(l, {})",
                is_false_assignment("l")
            );
            out.validating.push(validating_policy(
                &configmap_name,
                policy,
                configmap_rules(),
                Vec::new(),
                variables,
                &expression,
                decided.message(policy, "a ConfigMap cloud config"),
            ));
            out.validating_bindings
                .push(binding(&configmap_name, Some(actions)));
        }
        let gitops_name = format!("stackgate-{}-chart-values", policy.name);
        let mut variables = common.clone();
        variables.extend(gitops_variables());
        let expression = format!(
            "!variables.inScope || variables.exempt || !variables.valuesDecided.exists(v, {})",
            structured_false("v", decided.key())
        );
        out.validating.push(validating_policy(
            &gitops_name,
            policy,
            gitops_rules(),
            vec![spec_or_exemption_changed(policy)],
            variables,
            &expression,
            decided.message(
                policy,
                "the openstack-cloud-controller-manager chart's values (cloudConfig.loadBalancer)",
            ),
        ));
        out.validating_bindings
            .push(binding(&gitops_name, Some(actions)));

        if decided == Decided::Serial && matches!(policy.mode, Mode::Enforce | Mode::Warn) {
            if let Some(sites) = configmap_site_keys(set, true) {
                let name = format!("stackgate-{}-configmaps-add", policy.name);
                let mut variables = common.clone();
                variables.extend(configmap_mutation_variables(&sites));
                out.mutating.push(mutating_policy(
                    &name,
                    configmap_rules(),
                    Vec::new(),
                    variables,
                    &configmap_patch(),
                ));
                out.mutating_bindings.push(binding(&name, None));
            }
            let name = format!("stackgate-{}-chart-values-add", policy.name);
            let mut variables = common;
            variables.extend(gitops_variables());
            out.mutating.push(mutating_policy(
                &name,
                gitops_rules(),
                vec![spec_or_exemption_changed(policy)],
                variables,
                &values_patch(),
            ));
            out.mutating_bindings.push(binding(&name, None));
        }
    }
    out
}

fn var(name: &str, expression: String) -> Value {
    json!({"name": name, "expression": expression})
}

/// `inScope` (the policy's namespaces) and `exempt` (its annotation with a non-empty reason,
/// as `engine::exemption_reason` reads it, set by a requester the policy allows or already
/// stored in `oldObject`).
fn common_variables(policy: &Policy) -> Vec<Value> {
    let namespace = "(has(object.metadata.namespace) ? object.metadata.namespace : '')";
    let list = |names: &[String]| {
        let items: Vec<String> = names.iter().map(|n| cel_str(n)).collect();
        format!("[{}]", items.join(", "))
    };
    let mut scope = Vec::new();
    if !policy.scope.namespaces.is_empty() {
        scope.push(format!("{namespace} in {}", list(&policy.scope.namespaces)));
    }
    if !policy.scope.exclude_namespaces.is_empty() {
        scope.push(format!(
            "!({namespace} in {})",
            list(&policy.scope.exclude_namespaces)
        ));
    }
    let in_scope = if scope.is_empty() {
        "true".to_owned()
    } else {
        scope.join(" && ")
    };
    // As the engine judges it (`engine::judge`): the annotation counts when the
    // requester is a listed user or in a listed group, or when the stored object already holds
    // the same annotation with the same value (a tenant's later edits of an approved object).
    let exempt = match (policy.exemption_annotation(), &policy.exemptions.annotation) {
        (Some(key), Some(who)) => {
            let key = cel_str(&key);
            let mut allowed = Vec::new();
            if !who.allowed_users.is_empty() {
                allowed.push(format!(
                    "request.userInfo.username in {}",
                    list(&who.allowed_users)
                ));
            }
            if !who.allowed_groups.is_empty() {
                allowed.push(format!(
                    "(has(request.userInfo.groups) && \
                     request.userInfo.groups.exists(g, g in {}))",
                    list(&who.allowed_groups)
                ));
            }
            allowed.push(format!(
                "(oldObject != null && has(oldObject.metadata.annotations) && \
                 {key} in oldObject.metadata.annotations && \
                 oldObject.metadata.annotations[{key}] == object.metadata.annotations[{key}])"
            ));
            format!(
                "has(object.metadata.annotations) && {key} in object.metadata.annotations && \
                 object.metadata.annotations[{key}].trim() != '' && ({})",
                allowed.join(" || ")
            )
        }
        _ => "false".to_owned(),
    };
    debug_assert!(EXEMPT_ANNOTATION_PREFIX.starts_with("stackgate.dev/"));
    vec![var("inScope", in_scope), var("exempt", exempt)]
}

/// A named ConfigMap site of the sites document.
#[derive(Debug, Clone)]
struct NamedSite {
    namespace: String,
    name: String,
    key: String,
    /// Whether stackgate may edit it (`mutate`).
    mutate: bool,
    /// Shared with other platforms: decided only for OpenStack content.
    shared: bool,
}

/// The named ConfigMap sites, and the label that makes any ConfigMap one.
#[derive(Debug, Clone)]
struct ConfigMapSites {
    named: Vec<NamedSite>,
    label: Option<String>,
    /// Only the sites stackgate may edit (for the mutating policy).
    mutable_only: bool,
}

/// The ConfigMap sites of `set` (`mutable_only`: for the mutating policy, which edits only
/// those stackgate may edit); None when there are none.
fn configmap_site_keys(set: &PolicySet, mutable_only: bool) -> Option<ConfigMapSites> {
    let named: Vec<_> = set
        .sites
        .sites
        .iter()
        .filter(|s| s.kind == SiteKind::ConfigMap)
        .map(|s| NamedSite {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            key: s.key.clone(),
            mutate: s.mutate,
            shared: s.other_platforms,
        })
        .collect();
    let label = set.sites.label.clone();
    let any = named.iter().any(|s| s.mutate || !mutable_only) || label.is_some();
    any.then_some(ConfigMapSites {
        named,
        label,
        mutable_only,
    })
}

fn configmap_rules() -> Value {
    json!({"resourceRules": [{
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["configmaps"],
    }]})
}

fn gitops_rules() -> Value {
    json!({"resourceRules": [
        {
            "apiGroups": ["helm.toolkit.fluxcd.io"],
            "apiVersions": ["v2", "v2beta2", "v2beta1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["helmreleases"],
        },
        {
            "apiGroups": ["argoproj.io"],
            "apiVersions": ["v1alpha1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["applications"],
        },
    ]})
}

/// The webhook for GitOps objects is called on UPDATE only when `spec` changed or an exemption
/// annotation was added, changed or removed (the chart's `spec-or-exemption-changed`
/// matchCondition): the policies do the same, so they never refuse a metadata update the
/// webhook would not see, and an exemption's end (its annotation removed while `false` stays)
/// is judged. Only this policy's own annotation is looked at: two lookups in known maps, where
/// the chart's walk over every annotation has no cost bound a policy could keep.
fn spec_or_exemption_changed(policy: &Policy) -> Value {
    let key = cel_str(&format!("{EXEMPT_ANNOTATION_PREFIX}{}", policy.name));
    let held =
        |o: &str| format!("(has({o}.metadata.annotations) && {key} in {o}.metadata.annotations)");
    let (now, before) = (held("object"), held("oldObject"));
    json!({
        "name": "spec-or-exemption-changed",
        "expression": format!(
            "request.operation != 'UPDATE' || !has(object.spec) || !has(oldObject.spec) || \
             object.spec != oldObject.spec || {now} != {before} || ({now} && \
             object.metadata.annotations[{key}] != oldObject.metadata.annotations[{key}])"
        ),
    })
}

/// `namedKeys`: the data keys the sites document names for this ConfigMap's namespace and
/// name. `siteKeys`: the data keys that are sites (the named ones, only those stackgate may
/// edit for the mutating policy, and the key its site label names unless a named site of this
/// object has that key: as in `sites::object_data::find`, the named site's rules win, so a
/// label never makes a validate-only or shared site editable). `sharedKeys`: those of sites
/// other platforms share.
fn site_key_variables(sites: &ConfigMapSites) -> Vec<Value> {
    let ns = "(has(object.metadata.namespace) ? object.metadata.namespace : '')";
    let name = "(has(object.metadata.name) ? object.metadata.name : '')";
    let mut named = Vec::new();
    let mut parts = Vec::new();
    let mut shared = Vec::new();
    for site in &sites.named {
        let part = format!(
            "({ns} == {} && {name} == {} ? [{}] : [])",
            cel_str(&site.namespace),
            cel_str(&site.name),
            cel_str(&site.key)
        );
        named.push(part.clone());
        if sites.mutable_only && !site.mutate {
            continue;
        }
        if site.shared {
            shared.push(part.clone());
        }
        parts.push(part);
    }
    if let Some(label) = &sites.label {
        let label = cel_str(label);
        parts.push(format!(
            "(has(object.metadata.labels) && {label} in object.metadata.labels && \
             !(object.metadata.labels[{label}] in variables.namedKeys) ? \
             [object.metadata.labels[{label}]] : [])"
        ));
    }
    let join = |v: &[String]| {
        if v.is_empty() {
            "[]".to_owned()
        } else {
            v.join(" + ")
        }
    };
    vec![
        var("namedKeys", join(&named)),
        var(
            "siteKeys",
            format!(
                "({}).filter(k, has(object.data) && k in object.data)",
                join(&parts)
            ),
        ),
        var("sharedKeys", join(&shared)),
    ]
}

/// The two regular expressions of the gate, applied to `t`.
fn gate_cel(t: &str) -> String {
    format!(
        "size({t}) <= {MAX_DECIDED_TEXT_BYTES} && {t}.matches({}) && {t}.matches({})",
        cel_str(PLAIN_INI_GATE),
        cel_str(&gate_structure())
    )
}

/// The text of every `[LoadBalancer]` section of `t` (a gated text), joined.
fn lb_text_cel(t: &str) -> String {
    format!(
        "('\\n' + {t}).split('\\n[').filter(c, c.matches({})).join('\\n')",
        cel_str(LB_CHUNK)
    )
}

fn configmap_variables(sites: &ConfigMapSites, decided: Decided) -> Vec<Value> {
    let mut vars = site_key_variables(sites);
    vars.push(var(
        "plainTexts",
        format!(
            "variables.siteKeys.map(k, object.data[k]).filter(t, {})",
            gate_cel("t")
        ),
    ));
    // Two variables, each with its own per-call cost limit (see
    // `configmap_mutation_variables`): the `[LoadBalancer]` text, then its assignments.
    vars.push(var(
        "lbTexts",
        format!("variables.plainTexts.map(t, {})", lb_text_cel("t")),
    ));
    vars.push(var(
        "lastAssignments",
        format!(
            "variables.lbTexts.map(t, t.findAll({})).filter(a, size(a) > 0).map(a, a[size(a) - 1])",
            cel_str(&assignment_regex(decided.key()))
        ),
    ));
    vars
}

/// Whether an assignment line `l` (`key = value`, or a bare `key`, which is true) sets a false
/// literal: gcfg ends an unquoted value at `;` or `#` and trims blanks around it.
fn is_false_assignment(l: &str) -> String {
    format!(
        "{l}.contains('=') && {l}.substring({l}.indexOf('=') + 1).split(';')[0].split('#')[0].trim().lowerAscii() in {FALSE_LITERALS}"
    )
}

/// The keys (`missingKeys`) of mutable ConfigMap sites whose plain config lacks the serial
/// setting in every `[LoadBalancer]` section (and, on a shared site, is OpenStack content).
///
/// Four variables, not one: the apiserver gives each variable its own per-call cost limit
/// (`PerCallLimit`, 1,000,000, `k8s.io/apiserver/pkg/cel/environment/base.go`) out of the
/// policy's budget (`RuntimeCELCostBudget`, 10,000,000), and one expression doing every pass
/// over a text ran out at 49 KB. `tests/admission_policies_cel.rs` bounds each.
fn configmap_mutation_variables(sites: &ConfigMapSites) -> Vec<Value> {
    let mut vars = site_key_variables(sites);
    vars.push(var(
        "plainKeys",
        format!(
            "variables.siteKeys.filter(k, {})",
            gate_cel("object.data[k]")
        ),
    ));
    // Pairs of a key and its `[LoadBalancer]` text (`string(k)`: the apiserver's type checker
    // refuses a list of a `dyn` and a `string`).
    vars.push(var(
        "lbTexts",
        format!(
            "variables.plainKeys.map(k, [string(k), {}])",
            lb_text_cel("object.data[k]")
        ),
    ));
    vars.push(var(
        "lbMissingKeys",
        format!(
            "variables.lbTexts.filter(p, size(p[1].findAll({})) == 0).map(p, p[0])",
            cel_str(&assignment_regex(serial::KEY)),
        ),
    ));
    // The OpenStack-content check runs on shared keys only (a label never names one).
    vars.push(var(
        "sharedMissingKeys",
        "variables.lbMissingKeys.filter(k, k in variables.sharedKeys)".to_owned(),
    ));
    vars.push(var(
        "openstackKeys",
        format!(
            "variables.sharedMissingKeys.filter(k, {})",
            openstack_config_cel("object.data[k]"),
        ),
    ));
    vars.push(var(
        "missingKeys",
        "variables.lbMissingKeys.filter(k, !(k in variables.sharedKeys) || k in variables.openstackKeys)"
            .to_owned(),
    ));
    vars
}

fn configmap_patch() -> String {
    let line = format!("[LoadBalancer]\n{} = true\n", serial::KEY);
    format!(
        "!variables.inScope || variables.exempt ? [] : variables.missingKeys.map(k, JSONPatch{{op: 'replace', path: '/data/' + jsonpatch.escapeKey(k), value: object.data[k] + (size(object.data[k]) == 0 || object.data[k].endsWith('\\n') ? '' : '\\n') + {}}})",
        cel_str(&line)
    )
}

/// Whether chart reference `c` names the CCM chart: its last `/` segment is the chart name
/// (a subset of `sites::chart::chart_matches`, which also knows versions and `.tgz` files).
///
/// The engine reads a reference as a URL (`sites::chart::chart_reference_name`): the query and
/// fragment are not part of the path, `;params` are dropped and `%XX` escapes decoded. CEL
/// decodes none of it, so a reference holding `?`, `#` or `%` anywhere is left to the webhook:
/// with those gone, the last raw `/` segment is the name both read.
fn ours_cel(c: &str) -> String {
    let names: Vec<String> = DEFAULT_CHARTS.iter().map(|n| regex_escape(n)).collect();
    format!(
        "size({c}) <= {MAX_DECIDED_CHART_REF_BYTES} && {c}.matches({})",
        cel_str(&format!("^(?:[^?#%]*/)?(?:{})$", names.join("|")))
    )
}

/// The chart's section keys (`sites::render::SECTIONS`).
fn section_keys() -> String {
    let keys: Vec<String> = crate::sites::render::SECTIONS
        .iter()
        .map(|(k, _)| cel_str(k))
        .collect();
    format!("[{}]", keys.join(", "))
}

/// Whether values map `v` is one the policies decide: the Secret is rendered, no
/// `cloudConfigContents`, and `cloudConfig` is a map whose rendered sections are null (Helm
/// drops them) or maps of plain gcfg names to scalars that every generation of the chart
/// writes alike ([`GENERATION_PROOF_SCALAR`]). The
/// comprehension variables (`section`, `entry`) differ from every caller's (`source`): CEL
/// shadows an outer variable of the same name.
fn plain_values(v: &str) -> String {
    let entry = format!("{v}.cloudConfig[section][entry]");
    format!(
        "has({v}.cloudConfig) && !has({v}.cloudConfigContents) && \
         (!has({v}.secret) || ((!has({v}.secret.enabled) || {v}.secret.enabled == true) && \
         (!has({v}.secret.create) || {v}.secret.create == true))) && \
         size({v}.cloudConfig) <= {MAX_DECIDED_VALUES_ENTRIES} && \
         {sections}.all(section, !(section in {v}.cloudConfig) || \
         {v}.cloudConfig[section] == null || \
         (size({v}.cloudConfig[section]) <= {MAX_DECIDED_VALUES_ENTRIES} && \
         {v}.cloudConfig[section].all(entry, size(entry) <= {MAX_DECIDED_VALUES_KEY_BYTES} && \
         entry.matches({ident}) && {entry} != null && \
         size(string({entry})) <= {MAX_DECIDED_VALUES_VALUE_BYTES} && \
         string({entry}).matches({scalar}))))",
        sections = section_keys(),
        ident = cel_str(&format!("^{IDENT}$")),
        scalar = cel_str(GENERATION_PROOF_SCALAR),
    )
}

/// A values scalar every generation of the chart writes so that gcfg reads the same value
/// (`crate::sites::generation`): chart 1.0.0–1.3.0 and 2.24.0 write values unquoted, where a
/// blank at either end is trimmed, `;` and `#` start a comment and `"` and `\` are gcfg's
/// quoting, and later ones with Sprig's `quote`; a null is `<no value>` unquoted and an empty
/// value quoted. Printable ASCII without those characters and blanks reads alike in both.
const GENERATION_PROOF_SCALAR: &str = r#"^[!$-:<-\[\]-~]*$"#;

/// `valuesDecided`: the structured values maps of the CCM chart this object holds that the
/// policies decide. HelmRelease: `spec.values` with no `valuesFrom`. Application: the
/// `valuesObject` of each source naming the chart with no `valueFiles`, `parameters` or
/// `fileParameters`, in an Application of at most `MAX_DECIDED_SOURCES` sources.
/// `sourceValues`: the same for `spec.source` only (what the mutating policy edits).
fn gitops_variables() -> Vec<Value> {
    let empty = |f: &str| format!("(!has({f}) || size({f}) == 0)");
    let release_chart = "(has(object.spec.chart) && has(object.spec.chart.spec) && has(object.spec.chart.spec.chart) ? object.spec.chart.spec.chart : (has(object.spec.chartRef) && has(object.spec.chartRef.name) ? object.spec.chartRef.name : ''))";
    // The chart source's own values files (`valuesFiles`, the deprecated `valuesFile`) are
    // merged under `spec.values` as `valuesFrom` is: values the engine cannot see.
    let chart_spec = "object.spec.chart.spec";
    let no_files = format!(
        "(!has(object.spec.chart) || !has({chart_spec}) || ({files} && {file}))",
        files = empty(&format!("{chart_spec}.valuesFiles")),
        file = empty(&format!("{chart_spec}.valuesFile")),
    );
    let release = format!(
        "object.kind == 'HelmRelease' && has(object.spec) && {ours} && has(object.spec.values) && {no_from} && {no_files} && {plain} ? [object.spec.values] : []",
        ours = ours_cel(release_chart),
        no_from = empty("object.spec.valuesFrom"),
        plain = plain_values("object.spec.values"),
    );
    let source_ok = |s: &str| {
        format!(
            "{ours} && has({s}.helm) && has({s}.helm.valuesObject) && {files} && {params} && {fparams} && {plain}",
            ours = ours_cel(&format!(
                "(has({s}.chart) ? {s}.chart : (has({s}.path) ? {s}.path : ''))"
            )),
            files = empty(&format!("{s}.helm.valueFiles")),
            params = empty(&format!("{s}.helm.parameters")),
            fparams = empty(&format!("{s}.helm.fileParameters")),
            plain = plain_values(&format!("{s}.helm.valuesObject")),
        )
    };
    let sources = "(has(object.spec.source) ? [object.spec.source] : []) + (has(object.spec.sources) ? object.spec.sources : [])";
    let application = format!(
        "object.kind == 'Application' && has(object.spec) && size({sources}) <= {MAX_DECIDED_SOURCES} ? ({sources}).filter(source, {ok}).map(source, source.helm.valuesObject) : []",
        ok = source_ok("source"),
    );
    let single_source = format!(
        "object.kind == 'Application' && has(object.spec) && has(object.spec.source) && size({sources}) <= {MAX_DECIDED_SOURCES} && {ok}",
        ok = source_ok("object.spec.source"),
    );
    vec![
        var("valuesDecided", format!("({release}) + ({application})")),
        var("releaseValues", format!("size({release}) > 0")),
        var("sourceValues", single_source),
    ]
}

/// Whether decided values map `v` sets `cloudConfig.loadBalancer[key]` to a false literal
/// (the chart quotes it; gcfg reads the quoted text).
fn structured_false(v: &str, key: &str) -> String {
    let key = cel_str(key);
    // The size checks change nothing for decided values (their maps are this small) and
    // let the expression's cost be bounded on its own; `false` is the longest false literal.
    let value = format!("string({v}.cloudConfig.loadBalancer[{key}])");
    format!(
        "has({v}.cloudConfig.loadBalancer) && \
         size({v}.cloudConfig.loadBalancer) <= {MAX_DECIDED_VALUES_ENTRIES} && \
         {key} in {v}.cloudConfig.loadBalancer && size({value}) <= 5 && \
         {value}.lowerAscii() in {FALSE_LITERALS}"
    )
}

/// JSON Patch adding the serial setting where decided values lack it (no key that folds to
/// it in `cloudConfig.loadBalancer`). The size checks change nothing for decided values (the
/// variables hold only values within the limits) and bound the expression's cost on its own.
fn values_patch() -> String {
    let key = cel_str(serial::KEY);
    let escaped = cel_str(&serial::KEY.replace('~', "~0").replace('/', "~1"));
    // A null section is no section: Helm drops a null value, and the engine adds the section.
    let absent = |v: &str| {
        format!("(!has({v}.cloudConfig.loadBalancer) || {v}.cloudConfig.loadBalancer == null)")
    };
    let missing = |v: &str| {
        format!(
            "({} || (size({v}.cloudConfig.loadBalancer) <= {MAX_DECIDED_VALUES_ENTRIES} && \
             !{v}.cloudConfig.loadBalancer.exists(k, size(k) == {len} && k.lowerAscii() == {key})))",
            absent(v),
            len = serial::KEY.len(),
        )
    };
    let ops = |v: &str, base: &str| {
        format!(
            "!{absent} ? [JSONPatch{{op: 'add', path: {inside} + {escaped}, value: true}}] : [JSONPatch{{op: 'add', path: {section}, value: {{{key}: true}}}}]",
            absent = absent(v),
            inside = cel_str(&format!("{base}/cloudConfig/loadBalancer/")),
            section = cel_str(&format!("{base}/cloudConfig/loadBalancer")),
        )
    };
    let release = "object.spec.values";
    let source = "object.spec.source.helm.valuesObject";
    format!(
        "!variables.inScope || variables.exempt ? [] : \
         (variables.releaseValues && {rm} ? ({rops}) : \
         (variables.sourceValues && {sm} ? ({sops}) : []))",
        rm = missing(release),
        rops = ops(release, "/spec/values"),
        sm = missing(source),
        sops = ops(source, "/spec/source/helm/valuesObject"),
    )
}

fn validating_policy(
    name: &str,
    policy: &Policy,
    constraints: Value,
    match_conditions: Vec<Value>,
    variables: Vec<Value>,
    expression: &str,
    message: String,
) -> Value {
    let mut spec = json!({
        "failurePolicy": "Ignore",
        "matchConstraints": constraints,
        "variables": variables,
        "validations": [{
            "expression": expression,
            "message": message,
            "reason": "Invalid",
        }],
    });
    if !match_conditions.is_empty() {
        spec["matchConditions"] = Value::Array(match_conditions);
    }
    json!({
        "apiVersion": V1,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "stackgate"},
            "annotations": {"stackgate.dev/policy": policy.name, "stackgate.dev/rule": policy.rule.as_str()},
        },
        "spec": spec,
    })
}

fn mutating_policy(
    name: &str,
    constraints: Value,
    match_conditions: Vec<Value>,
    variables: Vec<Value>,
    expression: &str,
) -> Value {
    let mut spec = json!({
        "failurePolicy": "Ignore",
        "reinvocationPolicy": "Never",
        "matchConstraints": constraints,
        "variables": variables,
        "mutations": [{
            "patchType": "JSONPatch",
            "jsonPatch": {"expression": expression},
        }],
    });
    if !match_conditions.is_empty() {
        spec["matchConditions"] = Value::Array(match_conditions);
    }
    json!({
        "apiVersion": V1,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "stackgate"},
        },
        "spec": spec,
    })
}

/// A binding of policy `name` (validation actions for a ValidatingAdmissionPolicy). Namespaces
/// labelled `stackgate.dev/ignore=true` are left out, as the webhooks leave them out.
fn binding(name: &str, actions: Option<&[&str]>) -> Value {
    let kind = if actions.is_some() {
        "ValidatingAdmissionPolicyBinding"
    } else {
        "MutatingAdmissionPolicyBinding"
    };
    let mut spec = json!({
        "policyName": name,
        "matchResources": {
            "namespaceSelector": {"matchExpressions": [
                {"key": "stackgate.dev/ignore", "operator": "NotIn", "values": ["true"]},
            ]},
        },
    });
    if let Some(actions) = actions {
        spec["validationActions"] = json!(actions);
    }
    json!({
        "apiVersion": V1,
        "kind": kind,
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "stackgate"}},
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let v = |s: &str| s.parse::<KubeVersion>().unwrap();
        assert_eq!(
            v("1.30"),
            KubeVersion {
                major: 1,
                minor: 30
            }
        );
        assert_eq!(
            v("v1.36.2"),
            KubeVersion {
                major: 1,
                minor: 36
            }
        );
        assert_eq!(
            v("1.31+"),
            KubeVersion {
                major: 1,
                minor: 31
            }
        );
        assert!("1".parse::<KubeVersion>().is_err());
        assert!("one.two".parse::<KubeVersion>().is_err());
        assert_eq!(v("1.27").validating_api(), None);
        assert_eq!(
            v("1.29").validating_api(),
            Some("admissionregistration.k8s.io/v1beta1")
        );
        assert_eq!(v("1.30").validating_api(), Some(V1));
        assert_eq!(v("1.33").mutating_api(), None);
        assert_eq!(
            v("1.34").mutating_api(),
            Some("admissionregistration.k8s.io/v1beta1")
        );
        assert_eq!(v("1.36").mutating_api(), Some(V1));
    }

    #[test]
    fn cel_literals_escape() {
        assert_eq!(cel_str("a'b\\c\n"), "'a\\'b\\\\c\\n'");
    }

    #[test]
    fn objects_follow_the_version() {
        let set = PolicySet::embedded().unwrap();
        let generated = generate(&set);
        let kinds = |v: &str| -> Vec<(String, String)> {
            generated
                .objects(v.parse().unwrap())
                .unwrap()
                .iter()
                .map(|o| {
                    (
                        o["apiVersion"].as_str().unwrap().to_owned(),
                        o["kind"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        };
        let on_130 = kinds("1.30");
        assert!(on_130.iter().all(|(_, k)| !k.starts_with("Mutating")));
        assert!(on_130.iter().any(|(_, k)| k == "ValidatingAdmissionPolicy"));
        let on_136 = kinds("1.36");
        assert!(
            on_136
                .iter()
                .any(|(a, k)| k == "MutatingAdmissionPolicy" && a == V1)
        );
        assert!(matches!(
            generated.objects("1.27".parse().unwrap()),
            Err(AdmissionPoliciesError::Unsupported(_))
        ));
    }
}
