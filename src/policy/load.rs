//! Loading and validating policy documents (embedded or from a directory).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{API_VERSION, Policy, RuleId, SitesDocument};
use crate::facts::FactId;
use crate::releases::{self, ReleaseCatalog};
use crate::rules::{FAMILIES, ParamsInput, yaml_error_message};

/// The documents of the default set that are not a family's policy, embedded at build time
/// so the binary runs with no files (each family embeds its own default policy).
const EMBEDDED: &[(&str, &str)] = &[
    (
        "cloud-config-sites.yaml",
        include_str!("../../policies/cloud-config-sites.yaml"),
    ),
    (
        "release-catalog.yaml",
        include_str!("../../policies/release-catalog.yaml"),
    ),
];

/// Why a policy set could not be loaded. Every variant names the file to fix.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The directory or a file in it could not be read.
    // The IO error is part of the message and deliberately not a `source`: anyhow's `{:#}`
    // would print it twice.
    #[error("cannot read policy path {}: {error}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The IO error.
        error: std::io::Error,
    },
    /// A document is not valid YAML for its kind (unknown field, wrong type, ...).
    #[error("{file}: {message}")]
    Parse {
        /// File name.
        file: String,
        /// Parser message with line and column.
        message: String,
    },
    /// The documents are individually valid but do not fit together.
    #[error("{file}: {message}")]
    Invalid {
        /// File name.
        file: String,
        /// What is wrong.
        message: String,
    },
}

/// A validated set of policies and the cloud-config sites they act on.
#[derive(Debug, Clone)]
pub struct PolicySet {
    /// Policies in load order: the embedded list's order, or file-name order for a directory.
    pub policies: Vec<Policy>,
    /// Where cloud configs live.
    pub sites: SitesDocument,
    /// Release catalog: ServiceDefaults → annotation mappings and the static release table.
    pub releases: ReleaseCatalog,
    /// `embedded` or the directory the set came from.
    pub origin: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Header {
    api_version: Option<String>,
    kind: Option<String>,
}

impl PolicySet {
    /// The default set compiled into the binary.
    pub fn embedded() -> Result<Self, PolicyError> {
        let files = EMBEDDED
            .iter()
            .chain(FAMILIES.iter().map(|f| &f.default_policy))
            .map(|(name, text)| ((*name).to_owned(), (*text).to_owned()))
            .collect();
        Self::from_files(files, "embedded".to_owned())
    }

    /// Every `*.yaml` / `*.yml` file in `dir` (not recursive), in file-name order.
    /// A directory without a `CloudConfigSites` document uses the embedded default sites.
    pub fn load_dir(dir: &Path) -> Result<Self, PolicyError> {
        let read_err = |error| PolicyError::Read {
            path: dir.to_path_buf(),
            error,
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(read_err)?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
            .collect();
        paths.sort();
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|error| PolicyError::Read {
                path: path.clone(),
                error,
            })?;
            files.push((path.display().to_string(), text));
        }
        Self::from_files(files, dir.display().to_string())
    }

    /// Parses and validates `(file name, text)` pairs.
    pub fn from_files(files: Vec<(String, String)>, origin: String) -> Result<Self, PolicyError> {
        let mut policies = Vec::new();
        let mut sites: Option<SitesDocument> = None;
        let mut catalog: Option<ReleaseCatalog> = None;
        let mut policy_files: Vec<(&String, &String)> = Vec::new();
        for (file, text) in &files {
            let parse_err = |e: serde_saphyr::Error| PolicyError::Parse {
                file: file.clone(),
                message: yaml_error_message(&e),
            };
            let header: Header = serde_saphyr::from_str(text).map_err(parse_err)?;
            if header.api_version.as_deref() != Some(API_VERSION) {
                return Err(invalid(file, format!("apiVersion must be {API_VERSION}")));
            }
            match header.kind.as_deref() {
                Some("Policy") => {
                    let policy: Policy = serde_saphyr::from_str(text).map_err(parse_err)?;
                    validate_policy(file, &policy)?;
                    policies.push(policy);
                    policy_files.push((file, text));
                }
                Some("CloudConfigSites") => {
                    if sites.is_some() {
                        return Err(invalid(
                            file,
                            "a second CloudConfigSites document; keep one".to_owned(),
                        ));
                    }
                    sites = Some(serde_saphyr::from_str(text).map_err(parse_err)?);
                }
                Some(releases::catalog::KIND) => {
                    if catalog.is_some() {
                        return Err(invalid(
                            file,
                            "a second ReleaseCatalog document; keep one".to_owned(),
                        ));
                    }
                    let doc: ReleaseCatalog = serde_saphyr::from_str(text).map_err(parse_err)?;
                    doc.validate().map_err(|e| invalid(file, e.to_string()))?;
                    catalog = Some(doc);
                }
                other => {
                    return Err(invalid(
                        file,
                        format!(
                            "kind {:?} is not one of Policy, CloudConfigSites, ReleaseCatalog",
                            other.unwrap_or("")
                        ),
                    ));
                }
            }
        }
        let mut names = BTreeSet::new();
        for p in &policies {
            if !names.insert(p.name.as_str()) {
                return Err(invalid(
                    &origin,
                    format!("two policies are named {:?}", p.name),
                ));
            }
        }
        let sites = match sites {
            Some(s) => s,
            None if origin == "embedded" => {
                return Err(invalid(&origin, "no CloudConfigSites document".to_owned()));
            }
            None => Self::embedded()?.sites,
        };
        let releases = match catalog {
            Some(c) => c,
            None if origin == "embedded" => {
                return Err(invalid(&origin, "no ReleaseCatalog document".to_owned()));
            }
            None => Self::embedded()?.releases,
        };
        for (policy, (file, text)) in policies.iter_mut().zip(&policy_files) {
            policy.params = parse_family_params(file, text, policy, &releases)?;
        }
        Ok(Self {
            policies,
            sites,
            releases,
            origin,
        })
    }

    /// The same policies over another release catalog: every policy's parameters are parsed
    /// again against it (a release a policy names must be in its table).
    pub fn with_release_catalog(&self, catalog: ReleaseCatalog) -> Result<Self, PolicyError> {
        let mut next = self.clone();
        for policy in &mut next.policies {
            // The parameters as a document of their own: JSON is YAML.
            let text = format!("params: {}\n", policy.raw_params);
            policy.params = parse_family_params(&policy.name, &text, policy, &catalog)?;
        }
        next.releases = catalog;
        Ok(next)
    }

    /// The facts about the cluster this set needs, in [`FactId`] order: those the families of
    /// its enabled policies declare ([`crate::rules::Family::facts`]), and the platform when
    /// a site is shared with other platforms (`otherPlatforms`), and what CCM workloads read
    /// when a cloud-config family is enabled. Each face feeds only these.
    pub fn needed_facts(&self) -> Vec<FactId> {
        let mut needed: BTreeSet<FactId> = self
            .policies
            .iter()
            .filter(|p| p.mode != super::Mode::Off)
            .flat_map(|p| p.rule.family().facts.iter().copied())
            .collect();
        if self.sites.sites.iter().any(|site| site.other_platforms) {
            needed.insert(FactId::Platform);
        }
        // The keys a CCM reads are cloud-config sites: any enabled cloud-config family judges
        // them.
        if self.policies.iter().any(|p| {
            p.mode != super::Mode::Off
                && matches!(p.rule.family().check, crate::rules::Check::CloudConfig(_))
        }) {
            needed.insert(FactId::CcmConfigSource);
        }
        needed.into_iter().collect()
    }

    /// Whether an enabled policy's family reads `fact` (cheap: no allocation, for the request
    /// path).
    pub fn family_needs(&self, fact: FactId) -> bool {
        self.policies
            .iter()
            .any(|p| p.mode != super::Mode::Off && p.rule.family().facts.contains(&fact))
    }

    /// The enabled policies of one rule family.
    pub fn for_rule(&self, rule: RuleId) -> impl Iterator<Item = &Policy> {
        self.policies
            .iter()
            .filter(move |p| p.rule == rule && p.mode != super::Mode::Off)
    }

    /// The effective set as YAML documents, for `stackgate policies`.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        // serde_json keeps field order; JSON is valid YAML, one document per policy.
        let mut push = |v: serde_json::Result<String>| {
            out.push_str("---\n");
            out.push_str(&v.unwrap_or_else(|e| format!("# unprintable: {e}")));
            out.push('\n');
        };
        push(serde_json::to_string_pretty(&self.sites));
        push(serde_json::to_string_pretty(&self.releases));
        for p in &self.policies {
            push(serde_json::to_string_pretty(p));
        }
        out
    }
}

fn validate_policy(file: &str, p: &Policy) -> Result<(), PolicyError> {
    if p.kind != "Policy" {
        return Err(invalid(file, "kind must be Policy".to_owned()));
    }
    if p.name.is_empty()
        || !p
            .name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(invalid(
            file,
            format!(
                "name {:?} must be lowercase letters, digits and '-' (it becomes part of an annotation key)",
                p.name
            ),
        ));
    }
    validate_exemptions(file, p)
}

/// The exemption settings: the former `exemption:` field is refused with what to write instead
/// (kept, it would let every tenant exempt their own objects), and an `annotation` must name
/// someone (an empty list is a typo, not "nobody": leave `annotation` out for that).
fn validate_exemptions(file: &str, p: &Policy) -> Result<(), PolicyError> {
    if p.legacy_exemption.is_some() {
        return Err(invalid(
            file,
            format!(
                "`exemption` is replaced by `exemptions`: the annotation {} now counts only when                  a listed group or user sets it. Write `exemptions: {{annotation: {{allowedGroups:                  [<the platform team's group>]}}}}` (or `[{}]` to let anyone who may write the                  object exempt it, as `exemption: {{allowed: true}}` did), or remove it (no                  annotation exemptions)",
                format_args!("{}{}", super::EXEMPT_ANNOTATION_PREFIX, p.name),
                super::EVERY_USER_GROUP
            ),
        ));
    }
    if let Some(annotation) = &p.exemptions.annotation {
        if annotation.allowed_groups.is_empty() && annotation.allowed_users.is_empty() {
            return Err(invalid(
                file,
                "exemptions.annotation names no allowedGroups and no allowedUsers; list who may                  exempt, or remove `annotation` so that the annotation exempts nothing"
                    .to_owned(),
            ));
        }
        if let Some(empty) = annotation
            .allowed_groups
            .iter()
            .chain(&annotation.allowed_users)
            .find(|name| name.trim().is_empty())
        {
            return Err(invalid(
                file,
                format!("exemptions.annotation lists an empty group or user name ({empty:?})"),
            ));
        }
    }
    Ok(())
}

/// Has the policy's family parse its `params`. A parameter of another family is named as
/// such: "params.unknown only apply to rule control-plane-lb-guard, not …".
fn parse_family_params(
    file: &str,
    text: &str,
    policy: &Policy,
    catalog: &ReleaseCatalog,
) -> Result<crate::rules::Params, PolicyError> {
    let family = policy.rule.family();
    let input = ParamsInput {
        policy: &policy.name,
        text,
        catalog,
    };
    (family.parse_params)(&input).map_err(|message| {
        let foreign = policy
            .raw_params
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|name| !family.params.contains(&name.as_str()))
            .find_map(|name| {
                FAMILIES
                    .iter()
                    .find(|f| f.params.contains(&name.as_str()))
                    .map(|owner| (name, owner.id))
            });
        match foreign {
            Some((name, owner)) => invalid(
                file,
                format!(
                    "params.{name} only apply to rule {owner}, not {}",
                    policy.rule
                ),
            ),
            None => PolicyError::Parse {
                file: file.to_owned(),
                message,
            },
        }
    })
}

fn invalid(file: &str, message: String) -> PolicyError {
    PolicyError::Invalid {
        file: file.to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_set_loads() {
        let set = PolicySet::embedded().expect("embedded policies are valid");
        assert!(!set.policies.is_empty());
        assert!(!set.sites.sites.is_empty());
    }

    #[test]
    fn unknown_field_names_file_and_line() {
        let text = "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: x\nrule: serial-lb-api-calls\nmode: enforce\ndescription: d\nsource: s\nbogus: 1\n";
        let err = PolicySet::from_files(vec![("p.yaml".into(), text.into())], "dir".into())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("p.yaml: line 8 column 1"), "{err}");
        assert!(err.contains("unknown field `bogus`"), "{err}");
    }

    #[test]
    fn unknown_rule_and_mode_are_errors() {
        let base = "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: x\ndescription: d\nsource: s\n";
        for (extra, needle) in [
            ("rule: nope\nmode: enforce\n", "unknown variant `nope`"),
            (
                "rule: serial-lb-api-calls\nmode: loud\n",
                "unknown variant `loud`",
            ),
        ] {
            let err = PolicySet::from_files(
                vec![("p.yaml".into(), format!("{base}{extra}"))],
                "dir".into(),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn duplicate_names_are_errors() {
        let p = "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: x\nrule: serial-lb-api-calls\nmode: enforce\ndescription: d\nsource: s\n";
        let err = PolicySet::from_files(
            vec![("a.yaml".into(), p.into()), ("b.yaml".into(), p.into())],
            "dir".into(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("two policies are named \"x\""), "{err}");
    }

    const BASE: &str = "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: x\nrule: serial-lb-api-calls\nmode: enforce\ndescription: d\nsource: s\n";

    fn load(extra: &str) -> Result<PolicySet, PolicyError> {
        PolicySet::from_files(
            vec![("p.yaml".into(), format!("{BASE}{extra}"))],
            "dir".into(),
        )
    }

    #[test]
    fn the_former_exemption_field_is_refused_with_what_to_write() {
        let err = load("exemption:\n  allowed: true\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("p.yaml: `exemption` is replaced by `exemptions`"),
            "{err}"
        );
        assert!(err.contains("allowedGroups"), "{err}");
        assert!(err.contains("stackgate.dev/exempt.x"), "{err}");
    }

    #[test]
    fn an_annotation_exemption_must_name_someone() {
        for extra in [
            "exemptions:\n  annotation: {}\n",
            "exemptions:\n  annotation:\n    allowedGroups: []\n",
        ] {
            let err = load(extra).unwrap_err().to_string();
            assert!(
                err.contains("names no allowedGroups and no allowedUsers"),
                "{err}"
            );
        }
        let err = load("exemptions:\n  annotation:\n    allowedUsers: [\" \"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("an empty group or user name"), "{err}");
    }

    #[test]
    fn exemptions_are_parsed_strictly() {
        let err = load("exemptions:\n  annotation:\n    allowedGroup: [a]\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `allowedGroup`"), "{err}");
        let err =
            load("exemptions:\n  annotation:\n    allowedGroups: [a]\n    unverified: maybe\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("unknown variant `maybe`"), "{err}");
        let err = load("exemptions:\n  objects: true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `objects`"), "{err}");
    }

    #[test]
    fn who_may_exempt_and_what_check_does_without_a_requester() {
        use crate::policy::Unverified;
        let set = load("exemptions:\n  annotation:\n    allowedGroups: [platform-team]\n    allowedUsers: [alice]\n").unwrap();
        let rules = set.policies[0].exemptions.annotation.clone().unwrap();
        assert!(rules.allows("alice", &[]));
        assert!(rules.allows("bob", &["platform-team".to_owned()]));
        assert!(!rules.allows(
            "bob",
            &["tenants".to_owned(), "system:authenticated".to_owned()]
        ));
        assert!(
            !rules.allows("platform-team", &[]),
            "a group is not a username"
        );
        assert_eq!(rules.unverified(), Unverified::Apply);
        assert_eq!(rules.who(), "group platform-team or user alice");
        assert_eq!(
            set.policies[0].exemption_annotation().as_deref(),
            Some("stackgate.dev/exempt.x")
        );

        let open = load("exemptions:\n  annotation:\n    allowedGroups: [system:authenticated]\n")
            .unwrap();
        let open = open.policies[0].exemptions.annotation.clone().unwrap();
        assert!(open.allows("anyone", &["system:authenticated".to_owned()]));
        assert_eq!(open.unverified(), Unverified::Honour);

        let honour =
            load("exemptions:\n  annotation:\n    allowedGroups: [p]\n    unverified: honour\n")
                .unwrap();
        assert_eq!(
            honour.policies[0]
                .exemptions
                .annotation
                .as_ref()
                .unwrap()
                .unverified(),
            Unverified::Honour
        );

        let none = load("").unwrap();
        assert_eq!(none.policies[0].exemption_annotation(), None);
        let none = load("exemptions: {}\n").unwrap();
        assert_eq!(none.policies[0].exemption_annotation(), None);
    }

    #[test]
    fn no_shipped_enforce_policy_lets_every_user_exempt() {
        let set = PolicySet::embedded().unwrap();
        for p in &set.policies {
            if let (crate::policy::Mode::Enforce, Some(rules)) = (p.mode, &p.exemptions.annotation)
            {
                assert!(!rules.open_to_everyone(), "{}", p.name);
                assert!(
                    !rules.allows(
                        "tenant",
                        &[
                            "system:authenticated".to_owned(),
                            "system:serviceaccounts".to_owned()
                        ]
                    ),
                    "{}",
                    p.name
                );
            }
        }
    }

    #[test]
    fn directory_without_sites_uses_default_sites() {
        let p = "apiVersion: stackgate.dev/v1alpha1\nkind: Policy\nname: x\nrule: serial-lb-api-calls\nmode: warn\ndescription: d\nsource: s\n";
        let set = PolicySet::from_files(vec![("a.yaml".into(), p.into())], "dir".into()).unwrap();
        assert_eq!(set.sites, PolicySet::embedded().unwrap().sites);
    }
}
