//! Which admission API versions a target apiserver serves, and which of them the generated
//! objects are written in.
//!
//! The promise of `stackgate policies --output admission-policies`: `kubectl apply -f -` of
//! its output either succeeds fully or the output is never offered. So the target is
//! described as what it serves ([`ServedApis`]: discovery, `--api-versions` entries as
//! `helm template --api-versions` takes them, or what a default apiserver of a version
//! serves), and [`choose`] picks one served API version per generated kind or refuses,
//! naming what is missing and the `--only` flag that leaves it out on purpose.
//!
//! Refusing, rather than printing the served part with a warning, is deliberate: the output
//! is made to be piped into `kubectl apply`, where a stderr line is easily lost and the
//! pipeline exits 0 with half of the policies (the validating ones without the rewrites, or
//! the reverse). `--only validating` (or `mutating`) says in the command itself that half is
//! what is wanted.
//!
//! Pure: the cluster's discovery is read by the composition root (`compose.rs`).

use std::collections::BTreeSet;
use std::fmt;

use super::{AdmissionPolicies, AdmissionPoliciesError, KubeVersion};

/// The API group of the admission policies.
pub const GROUP: &str = "admissionregistration.k8s.io";

const V1: &str = "admissionregistration.k8s.io/v1";
const V1BETA1: &str = "admissionregistration.k8s.io/v1beta1";

/// The API versions stackgate writes each kind in, preferred first. v1alpha1 (1.26–1.27
/// ValidatingAdmissionPolicy, 1.32–1.33 MutatingAdmissionPolicy) is never written: its
/// schema differs and it was not checked on a real apiserver.
const WRITTEN_VERSIONS: [&str; 2] = [V1, V1BETA1];

/// A family of generated objects: a policy kind and its binding kind, always served and
/// written together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Family {
    /// ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding.
    Validating,
    /// MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding.
    Mutating,
}

impl Family {
    /// The policy kind and the binding kind.
    pub fn kinds(self) -> [&'static str; 2] {
        match self {
            Family::Validating => [
                "ValidatingAdmissionPolicy",
                "ValidatingAdmissionPolicyBinding",
            ],
            Family::Mutating => ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"],
        }
    }

    /// The family of an object kind (`ValidatingAdmissionPolicyBinding` → validating).
    pub fn of_kind(kind: &str) -> Option<Family> {
        [Family::Validating, Family::Mutating]
            .into_iter()
            .find(|f| f.kinds().contains(&kind))
    }

    /// The flag value of `--only`.
    fn flag(self) -> &'static str {
        match self {
            Family::Validating => "validating",
            Family::Mutating => "mutating",
        }
    }

    fn other(self) -> Family {
        match self {
            Family::Validating => Family::Mutating,
            Family::Mutating => Family::Validating,
        }
    }

    /// How an apiserver comes to serve the family (for the refusal message).
    fn how_served(self) -> &'static str {
        match self {
            Family::Validating => {
                "v1 from 1.30; v1beta1 on 1.28-1.29 only with \
                 --runtime-config=admissionregistration.k8s.io/v1beta1=true"
            }
            Family::Mutating => {
                "v1 from 1.36; v1beta1 on 1.34-1.35 only with \
                 --feature-gates=MutatingAdmissionPolicy=true \
                 --runtime-config=admissionregistration.k8s.io/v1beta1=true"
            }
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kinds()[0])
    }
}

/// What a target apiserver serves, as Helm's `.Capabilities.APIVersions` holds it: entries
/// `group/version` and `group/version/Kind`. A kind is served at a version when its
/// `group/version/Kind` entry is there, or when the bare `group/version` is there and no
/// kind of that version is listed (a bare entry given by hand stands for every kind of it;
/// discovery always lists kinds, so it is exact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedApis {
    entries: BTreeSet<String>,
    /// What the set describes, for the output's header and messages.
    origin: String,
}

impl ServedApis {
    /// What a default apiserver of `version` serves (no feature gates, no `--runtime-config`):
    /// ValidatingAdmissionPolicy v1 from 1.30 and MutatingAdmissionPolicy v1 from 1.36, as
    /// checked on real apiservers (1.26, 1.31, 1.34, 1.36; `real-apiserver.md` in the
    /// project's shared notes: beta versions of both — 1.28–1.29 and 1.34–1.35 — are off by
    /// default, as every beta API since Kubernetes 1.24).
    pub fn default_server(version: KubeVersion) -> Self {
        let mut entries = BTreeSet::new();
        let mut add = |family: Family| {
            entries.insert(V1.to_owned());
            for kind in family.kinds() {
                entries.insert(format!("{V1}/{kind}"));
            }
        };
        if version.at_least(30) {
            add(Family::Validating);
        }
        if version.at_least(36) {
            add(Family::Mutating);
        }
        ServedApis {
            entries,
            origin: format!("Kubernetes {version}"),
        }
    }

    /// What discovery lists: `(apiVersion, kind)` pairs (`admissionregistration.k8s.io/v1`,
    /// `ValidatingAdmissionPolicy`), described as `origin`.
    pub fn from_discovery<'a>(
        origin: &str,
        resources: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Self {
        let mut entries = BTreeSet::new();
        for (api_version, kind) in resources {
            entries.insert(api_version.to_owned());
            entries.insert(format!("{api_version}/{kind}"));
        }
        ServedApis {
            entries,
            origin: origin.to_owned(),
        }
    }

    /// Adds `--api-versions` entries (each may be a comma-separated list), as Helm adds them
    /// to the capabilities it knows: `group/version`, `group/version/Kind`, or a core `v1` /
    /// `v1/Kind`.
    pub fn add_entries<S: AsRef<str>>(&mut self, list: &[S]) -> Result<(), AdmissionPoliciesError> {
        let mut added = Vec::new();
        for item in list {
            for entry in item.as_ref().split(',').map(str::trim) {
                if entry.is_empty() {
                    continue;
                }
                let segments: Vec<&str> = entry.split('/').collect();
                let well_formed = (1..=3).contains(&segments.len())
                    && segments.iter().all(|s| {
                        !s.is_empty()
                            && s.chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
                    });
                if !well_formed {
                    return Err(AdmissionPoliciesError::BadApiVersion(entry.to_owned()));
                }
                self.entries.insert(entry.to_owned());
                added.push(entry.to_owned());
            }
        }
        if !added.is_empty() {
            self.origin = format!("{} with --api-versions {}", self.origin, added.join(","));
        }
        Ok(())
    }

    /// Whether `kind` is served at `api_version` (see [`ServedApis`]).
    pub fn serves(&self, api_version: &str, kind: &str) -> bool {
        if self.entries.contains(&format!("{api_version}/{kind}")) {
            return true;
        }
        let prefix = format!("{api_version}/");
        self.entries.contains(api_version) && !self.entries.iter().any(|e| e.starts_with(&prefix))
    }

    /// The API version `family` is written in: the first of v1, v1beta1 at which both of its
    /// kinds are served.
    pub fn version_of(&self, family: Family) -> Option<&'static str> {
        WRITTEN_VERSIONS
            .into_iter()
            .find(|api| family.kinds().iter().all(|kind| self.serves(api, kind)))
    }

    /// What the set describes (`Kubernetes 1.34 with --api-versions …`).
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

/// The API version of each family in the output; `None` leaves the family out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ApiChoice {
    /// ValidatingAdmissionPolicy and its binding.
    pub validating: Option<&'static str>,
    /// MutatingAdmissionPolicy and its binding.
    pub mutating: Option<&'static str>,
}

impl ApiChoice {
    /// The API version of `family`.
    pub fn of(self, family: Family) -> Option<&'static str> {
        match family {
            Family::Validating => self.validating,
            Family::Mutating => self.mutating,
        }
    }
}

/// Picks a served API version for every family `generated` holds (only `only`, when given),
/// or refuses: a family the target does not serve is never written, and never silently
/// dropped either.
pub fn choose(
    generated: &AdmissionPolicies,
    served: &ServedApis,
    only: Option<Family>,
) -> Result<ApiChoice, AdmissionPoliciesError> {
    let mut choice = ApiChoice::default();
    let mut missing = Vec::new();
    for family in [Family::Validating, Family::Mutating] {
        if only.is_some_and(|o| o != family) || generated.of_family(family).next().is_none() {
            continue;
        }
        match served.version_of(family) {
            Some(api) => match family {
                Family::Validating => choice.validating = Some(api),
                Family::Mutating => choice.mutating = Some(api),
            },
            None => missing.push(family),
        }
    }
    if missing.is_empty() {
        return Ok(choice);
    }
    let what = missing
        .iter()
        .map(|f| format!("{f} ({})", f.how_served()))
        .collect::<Vec<_>>()
        .join(" nor ");
    let subset = match (missing.as_slice(), only) {
        ([family], None) if served.version_of(family.other()).is_some() => format!(
            "Leave it out on purpose with --only {}; or describe",
            family.other().flag()
        ),
        _ => "Describe".to_owned(),
    };
    let example = missing
        .first()
        .map(|f| format!("{V1BETA1}/{}", f.kinds()[0]))
        .unwrap_or_default();
    Err(AdmissionPoliciesError::NotServed(format!(
        "{origin} serves no {what}, which the generated policies need: the output would not \
         install fully, so none is written. {subset} what the server serves with \
         --api-versions (as `helm template --api-versions` takes it, e.g. {example}), \
         --from-cluster or --kube-version; or use the webhook",
        origin = served.origin(),
    )))
}

/// [`choose`] for static manifests (KEP-5793): the apiserver's manifest loader reads only
/// `admissionregistration.k8s.io/v1`, and the validating directory always holds the
/// self-protection policy, so ValidatingAdmissionPolicy v1 must be served even with
/// `--only mutating`.
pub fn choose_static(
    generated: &AdmissionPolicies,
    served: &ServedApis,
    only: Option<Family>,
) -> Result<ApiChoice, AdmissionPoliciesError> {
    let choice = choose(generated, served, only)?;
    for family in [Family::Validating, Family::Mutating] {
        let api = match (family, choice.of(family)) {
            (Family::Validating, None) => served.version_of(family),
            (_, api) => api,
        };
        if api.is_some_and(|api| api != V1) || (family == Family::Validating && api.is_none()) {
            let subset = match family {
                Family::Mutating if only.is_none() => " (leave it out with --only validating)",
                _ => "",
            };
            return Err(AdmissionPoliciesError::NotServed(format!(
                "{origin} does not serve {family} in {V1}, the only version static manifests \
                 are read in{subset}",
                origin = served.origin()
            )));
        }
    }
    Ok(choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        s.parse().unwrap()
    }

    #[test]
    fn default_servers_serve_only_the_ga_versions() {
        let at = |version: &str, family| ServedApis::default_server(v(version)).version_of(family);
        assert_eq!(at("1.29", Family::Validating), None);
        assert_eq!(at("1.30", Family::Validating), Some(V1));
        assert_eq!(at("1.35", Family::Mutating), None);
        assert_eq!(at("1.36", Family::Mutating), Some(V1));
        assert_eq!(at("2.0", Family::Mutating), Some(V1));
    }

    #[test]
    fn entries_read_as_helm_writes_them() {
        let mut served = ServedApis::default_server(v("1.34"));
        served
            .add_entries(&[
                "apps/v1, admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy",
                "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicyBinding",
            ])
            .unwrap();
        assert_eq!(served.version_of(Family::Mutating), Some(V1BETA1));
        assert_eq!(served.version_of(Family::Validating), Some(V1));
        assert!(served.serves("apps/v1", "Deployment"), "bare: every kind");
        assert!(!served.serves(V1BETA1, "ValidatingAdmissionPolicy"));
        assert_eq!(
            served.origin(),
            "Kubernetes 1.34 with --api-versions apps/v1,admissionregistration.k8s.io/v1beta1/\
             MutatingAdmissionPolicy,admissionregistration.k8s.io/v1beta1/\
             MutatingAdmissionPolicyBinding"
        );
        for bad in ["a b/v1", "a//v1", "/v1", "a/v1/K/x", "a/v1/"] {
            assert_eq!(
                ServedApis::default_server(v("1.30")).add_entries(&[bad]),
                Err(AdmissionPoliciesError::BadApiVersion(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_policy_kind_without_its_binding_is_not_served() {
        let served = ServedApis::from_discovery(
            "the cluster",
            [
                (V1, "ValidatingAdmissionPolicy"),
                (V1, "MutatingAdmissionPolicy"),
            ],
        );
        assert_eq!(served.version_of(Family::Validating), None);
        assert_eq!(served.version_of(Family::Mutating), None);
        let served = ServedApis::from_discovery(
            "the cluster",
            [
                (V1BETA1, "MutatingAdmissionPolicy"),
                (V1BETA1, "MutatingAdmissionPolicyBinding"),
                (V1, "ValidatingAdmissionPolicy"),
            ],
        );
        assert_eq!(served.version_of(Family::Mutating), Some(V1BETA1));
        assert!(!served.serves(V1, "ValidatingAdmissionPolicyBinding"));
    }

    fn embedded() -> AdmissionPolicies {
        super::super::generate(&crate::policy::PolicySet::embedded().unwrap())
    }

    fn refusal(result: Result<ApiChoice, AdmissionPoliciesError>) -> String {
        match result {
            Err(AdmissionPoliciesError::NotServed(text)) => text,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn every_generated_family_is_served_or_the_target_is_refused() {
        let generated = embedded();
        assert!(!generated.mutating.is_empty() && !generated.validating.is_empty());
        let at = |version: &str| ServedApis::default_server(v(version));
        assert_eq!(
            choose(&generated, &at("1.36"), None),
            Ok(ApiChoice {
                validating: Some(V1),
                mutating: Some(V1)
            })
        );
        let text = refusal(choose(&generated, &at("1.30"), None));
        assert!(
            text.starts_with("Kubernetes 1.30 serves no MutatingAdmissionPolicy (v1 from 1.36"),
            "{text}"
        );
        assert!(text.contains("--only validating"), "{text}");
        assert_eq!(
            choose(&generated, &at("1.30"), Some(Family::Validating)),
            Ok(ApiChoice {
                validating: Some(V1),
                mutating: None
            })
        );
        // Nothing to leave out on purpose when what was asked for is missing.
        let text = refusal(choose(&generated, &at("1.30"), Some(Family::Mutating)));
        assert!(!text.contains("--only"), "{text}");
        let text = refusal(choose(&generated, &at("1.29"), None));
        assert!(
            text.contains("ValidatingAdmissionPolicy (") && text.contains(" nor Mutating"),
            "{text}"
        );
        assert!(!text.contains("--only"), "{text}");
        // `--only validating` is offered only where it would write something served.
        let mutating_only = AdmissionPolicies {
            validating: Vec::new(),
            validating_bindings: Vec::new(),
            ..generated.clone()
        };
        let text = refusal(choose(&mutating_only, &at("1.29"), None));
        assert!(!text.contains("--only"), "{text}");
        // A family that was not generated needs nothing.
        let validating_only = AdmissionPolicies {
            mutating: Vec::new(),
            mutating_bindings: Vec::new(),
            ..generated.clone()
        };
        assert_eq!(
            choose(&validating_only, &at("1.30"), None),
            Ok(ApiChoice {
                validating: Some(V1),
                mutating: None
            })
        );
        let mut beta = at("1.34");
        beta.add_entries(&[
            "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy,\
             admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicyBinding",
        ])
        .unwrap();
        assert_eq!(
            choose(&generated, &beta, None),
            Ok(ApiChoice {
                validating: Some(V1),
                mutating: Some(V1BETA1)
            })
        );
    }

    #[test]
    fn static_manifests_need_v1_and_the_validating_plugin() {
        let generated = embedded();
        let both = ApiChoice {
            validating: Some(V1),
            mutating: Some(V1),
        };
        let at_136 = ServedApis::default_server(v("1.36"));
        assert_eq!(choose_static(&generated, &at_136, None), Ok(both));
        assert_eq!(
            choose_static(&generated, &at_136, Some(Family::Mutating)),
            Ok(ApiChoice {
                validating: None,
                mutating: Some(V1)
            })
        );
        let beta_mutating = ServedApis::from_discovery(
            "the cluster",
            [
                (V1, "ValidatingAdmissionPolicy"),
                (V1, "ValidatingAdmissionPolicyBinding"),
                (V1BETA1, "MutatingAdmissionPolicy"),
                (V1BETA1, "MutatingAdmissionPolicyBinding"),
            ],
        );
        let text = refusal(choose_static(&generated, &beta_mutating, None));
        assert!(
            text.contains("MutatingAdmissionPolicy in admissionregistration.k8s.io/v1")
                && text.contains("--only validating"),
            "{text}"
        );
        // Asked for the mutating policies only: nothing to leave out on purpose.
        let text = refusal(choose_static(
            &generated,
            &beta_mutating,
            Some(Family::Mutating),
        ));
        assert!(!text.contains("--only"), "{text}");
        assert_eq!(
            choose_static(&generated, &beta_mutating, Some(Family::Validating)),
            Ok(ApiChoice {
                validating: Some(V1),
                mutating: None
            })
        );
        // The self-protection policy needs the validating plugin even with --only mutating.
        let mutating_only = ServedApis::from_discovery(
            "the cluster",
            [
                (V1, "MutatingAdmissionPolicy"),
                (V1, "MutatingAdmissionPolicyBinding"),
            ],
        );
        let text = refusal(choose_static(
            &generated,
            &mutating_only,
            Some(Family::Mutating),
        ));
        assert!(text.contains("ValidatingAdmissionPolicy in"), "{text}");
        let validating_beta = ServedApis::from_discovery(
            "the cluster",
            [
                (V1BETA1, "ValidatingAdmissionPolicy"),
                (V1BETA1, "ValidatingAdmissionPolicyBinding"),
            ],
        );
        let text = refusal(choose_static(
            &generated,
            &validating_beta,
            Some(Family::Validating),
        ));
        assert!(text.contains("ValidatingAdmissionPolicy in"), "{text}");
    }

    #[test]
    fn families_of_kinds() {
        assert_eq!(
            Family::of_kind("ValidatingAdmissionPolicyBinding"),
            Some(Family::Validating)
        );
        assert_eq!(
            Family::of_kind("MutatingAdmissionPolicy"),
            Some(Family::Mutating)
        );
        assert_eq!(Family::of_kind("ConfigMap"), None);
    }
}
