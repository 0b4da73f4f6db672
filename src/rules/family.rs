//! The registry of rule families, and what a family is: its id, what it reads, its typed
//! parameters, its check, its finding codes and its documentation example.
//!
//! The engine is a loop over [`FAMILIES`]; policy loading looks families up here to parse
//! their parameters and embeds their default policies; `stackgate rules` runs each family's
//! example. Nothing else names a family, so a new one is one module plus its line in
//! [`FAMILIES`].

use std::any::Any;
use std::sync::{Arc, LazyLock};

use kube::core::DynamicObject;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{ConfigView, FAMILIES, RuleOutput, Subject};
use crate::facts::FactId;
use crate::facts::ccm_config::CcmConfigReads;
pub use crate::facts::platform::Platform;
use crate::releases::{ReleaseCatalog, Snapshot};

/// The ids of [`FAMILIES`], for error messages that list them.
static IDS: LazyLock<Vec<&'static str>> =
    LazyLock::new(|| FAMILIES.iter().map(|f| f.id.as_str()).collect());

/// The name of a rule family, as written in policy files (`rule: serial-lb-api-calls`) and
/// used as a metric label. Only ids of registered families can be deserialized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(&'static str);

impl RuleId {
    /// Declares a family's id (used once, in the family's module).
    pub const fn new(id: &'static str) -> Self {
        RuleId(id)
    }

    /// Kebab-case name.
    pub fn as_str(self) -> &'static str {
        self.0
    }

    /// The registered family of this id.
    pub fn family(self) -> &'static Family {
        FAMILIES
            .iter()
            .copied()
            .find(|f| f.id == self)
            // Ids are only made by families' own `FAMILY` statics and by deserializing a
            // registered name, so every id has a family.
            .unwrap_or(FAMILIES[0])
    }

    /// The registered id spelled `name`.
    pub fn parse(name: &str) -> Option<RuleId> {
        FAMILIES.iter().map(|f| f.id).find(|id| id.0 == name)
    }
}

impl std::fmt::Display for RuleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl Serialize for RuleId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for RuleId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        RuleId::parse(&name).ok_or_else(|| serde::de::Error::unknown_variant(&name, IDS.as_slice()))
    }
}

/// One rule family.
#[derive(Debug)]
pub struct Family {
    /// The id policies name.
    pub id: RuleId,
    /// What the family reads, and its check.
    pub check: Check,
    /// The facts about the cluster its check reads from [`Context::facts`]: each face feeds
    /// only the facts that its enabled policies' families declare (`serve` starts their
    /// watchers, `check` and `audit` reduce them from their input).
    pub facts: &'static [FactId],
    /// The names of its parameters (`params.<name>` in a policy), so that a parameter of
    /// another family is reported as such.
    pub params: &'static [&'static str],
    /// Parses and validates a policy's `params` for this family, at load time.
    pub parse_params: fn(&ParamsInput<'_>) -> Result<Params, String>,
    /// Every [`super::Violation::code`] the family reports.
    pub codes: &'static [&'static str],
    /// A known-bad input for the documentation (`stackgate rules`), when the family has a
    /// self-contained one.
    pub example: fn() -> Option<Example>,
    /// The family's default policy: its file name under `policies/` and its text, embedded in
    /// the binary (`include_str!`).
    pub default_policy: (&'static str, &'static str),
    /// Whether an object family also runs on the objects embedded in a Cluster API
    /// ClusterResourceSet payload ([`crate::sites::payload`]). True only for families whose
    /// check reads the object alone: a payload is applied to another (workload) cluster, so
    /// a family that compares the object with facts of the cluster stackgate serves (its
    /// cloud config, its OpenStackVersions) would judge it against the wrong cluster.
    /// Always false for cloud-config and DELETE families.
    pub embedded: bool,
}

impl Family {
    /// Whether the family reads cloud configs (runs once per site).
    pub fn reads_cloud_configs(&self) -> bool {
        matches!(self.check, Check::CloudConfig(_))
    }
}

/// What a family reads, with its check function.
#[derive(Debug, Clone, Copy)]
pub enum Check {
    /// Each cloud config a site finds in a created or updated object.
    CloudConfig(fn(&ConfigView<'_>, &Params, &Context<'_>) -> RuleOutput),
    /// The created or updated object.
    Object(fn(&ObjectInput<'_>) -> RuleOutput),
    /// The object of a DELETE (the request's old object), with facts an adapter gathered.
    Delete(fn(&ObjectInput<'_>) -> RuleOutput),
}

/// What an object or DELETE check reads.
#[derive(Debug, Clone, Copy)]
pub struct ObjectInput<'a> {
    /// The write.
    pub subject: &'a Subject<'a>,
    /// The object the family reads: the new object, or the deleted one for a DELETE check.
    pub object: &'a DynamicObject,
    /// Where `object` holds the CCM chart's values, read once for every rule and site that
    /// asks ([`crate::sites::ObjectPlaces`]).
    pub places: &'a crate::sites::ObjectPlaces<'a>,
    /// Namespace of the request or object (None: cluster-scoped).
    pub namespace: Option<&'a str>,
    /// The policy's parsed parameters.
    pub params: &'a Params,
    /// Everything else the evaluation knows.
    pub context: &'a Context<'a>,
}

/// What the engine knows besides the write: the release catalog and the live release
/// snapshot, the facts an adapter gathered, and which families have an enforcing policy.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The release catalog of the policy set.
    pub catalog: &'a ReleaseCatalog,
    /// The live OpenStackVersions.
    pub releases: &'a Snapshot,
    /// Facts gathered for this write.
    pub facts: &'a Facts,
    /// Families with at least one policy in enforce mode.
    pub enforced: &'a [RuleId],
    /// The review's cancel flag: a rule that reads values again (a chart's values in a
    /// GitOps object) stops reading once it fires; the engine then discards the verdict.
    pub cancel: &'a crate::budget::Cancel,
}

impl Context<'_> {
    /// Whether a policy of `rule` enforces.
    pub fn enforces(&self, rule: RuleId) -> bool {
        self.enforced.contains(&rule)
    }
}

/// What a family's parameter parser reads.
#[derive(Debug, Clone, Copy)]
pub struct ParamsInput<'a> {
    /// The policy's name.
    pub policy: &'a str,
    /// The whole policy document, so that errors carry its line and column.
    pub text: &'a str,
    /// The release catalog of the set being loaded.
    pub catalog: &'a ReleaseCatalog,
}

/// A family's parsed parameters. Each family reads its own type back with [`Params::get`].
#[derive(Clone, Default)]
pub struct Params(Option<Arc<dyn Any + Send + Sync>>);

impl Params {
    /// Wraps a family's parameters.
    pub fn new<T: Any + Send + Sync>(params: T) -> Self {
        Params(Some(Arc::new(params)))
    }

    /// The parameters as `T`, when they are of that type.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.as_deref().and_then(|p| p.downcast_ref())
    }
}

impl std::fmt::Debug for Params {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Params(..)"
        } else {
            "Params(none)"
        })
    }
}

/// Parses the `params` of a policy document as `P` (absent: `P::default()`), reporting
/// errors with the document's line and column.
pub fn parse_params<P>(input: &ParamsInput<'_>) -> Result<Params, String>
where
    P: DeserializeOwned + Default + Send + Sync + 'static,
{
    #[derive(Deserialize)]
    struct Document<P> {
        #[serde(default = "Option::default")]
        params: Option<P>,
    }
    let doc: Document<P> =
        serde_saphyr::from_str(input.text).map_err(|e| yaml_error_message(&e))?;
    Ok(Params::new(doc.params.unwrap_or_default()))
}

/// A policy document's YAML error as one line: position and problem (serde-saphyr's first
/// line, without its `error: ` prefix).
pub(crate) fn yaml_error_message(error: &serde_saphyr::Error) -> String {
    let text = error.to_string();
    let line = text.lines().next().unwrap_or(&text);
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

/// The parameters of a family that has none: any parameter is an error.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Facts an IO adapter gathered for one write before evaluation, by family. The engine only
/// reads them, so evaluation stays pure: the same write and facts give the same verdict.
#[derive(Clone, Default)]
pub struct Facts {
    by_family: Vec<(RuleId, Arc<dyn Any + Send + Sync>)>,
    platform: Option<Platform>,
    ccm_reads: Option<Arc<CcmConfigReads>>,
    /// The exceptions in force and the instant they are judged at. Typed by the engine, which
    /// reads them (rules never do, and this layer cannot name a policy type).
    exceptions: Option<Arc<dyn Any + Send + Sync>>,
}

impl Facts {
    /// Facts for one family.
    pub fn of<T: Any + Send + Sync>(rule: RuleId, facts: T) -> Self {
        Facts {
            by_family: vec![(rule, Arc::new(facts))],
            ..Facts::default()
        }
    }

    /// `fact` for every registered family that declares it needs it ([`Family::facts`]).
    pub fn of_fact<T: Any + Send + Sync>(fact: FactId, value: T) -> Self {
        Self::of_reduced(vec![(fact, Arc::new(value))])
    }

    /// The facts a face reduced from its input ([`crate::facts::Collector::reduced`]), each
    /// for every registered family that declares it.
    pub fn of_reduced(reduced: Vec<crate::facts::Reduced>) -> Self {
        let mut facts = Facts::default();
        for (fact, value) in reduced {
            facts.by_family.extend(
                FAMILIES
                    .iter()
                    .filter(|family| family.facts.contains(&fact))
                    .map(|family| (family.id, Arc::clone(&value))),
            );
        }
        facts
    }

    /// Adds `other`'s facts (every source that gathered for one review contributes); a
    /// family's first fact and the first known platform win.
    pub fn merge(&mut self, other: Facts) {
        for (rule, fact) in other.by_family {
            if !self.by_family.iter().any(|(r, _)| *r == rule) {
                self.by_family.push((rule, fact));
            }
        }
        if self.platform.is_none() {
            self.platform = other.platform;
        }
        if self.ccm_reads.is_none() {
            self.ccm_reads = other.ccm_reads;
        }
        if self.exceptions.is_none() {
            self.exceptions = other.exceptions;
        }
    }

    /// Facts that carry the exceptions in force at one instant (the engine's
    /// `ExceptionsAt`): a face reads its clock once and every finding is judged at it.
    pub fn of_exceptions<T: Any + Send + Sync>(exceptions: Arc<T>) -> Self {
        Facts {
            exceptions: Some(exceptions),
            ..Facts::default()
        }
    }

    /// The exceptions in force, when a face gave them and they are of type `T`.
    pub fn exceptions<T: Any>(&self) -> Option<&T> {
        self.exceptions.as_deref().and_then(|e| e.downcast_ref())
    }

    /// Facts that say only which platform the cluster runs on.
    pub fn of_platform(platform: Platform) -> Self {
        Facts {
            platform: Some(platform),
            ..Facts::default()
        }
    }

    /// Facts that say which config objects the cluster's CCM containers read (the
    /// `CcmConfigSource` fact): the engine treats those keys as cloud-config sites.
    pub fn of_ccm_reads(reads: Arc<CcmConfigReads>) -> Self {
        Facts {
            ccm_reads: Some(reads),
            ..Facts::default()
        }
    }

    /// The config objects CCM containers read, when a face knows them.
    pub fn ccm_reads(&self) -> Option<&CcmConfigReads> {
        self.ccm_reads.as_deref()
    }

    /// The facts gathered for `rule`, when they are of type `T`.
    pub fn get<T: Any>(&self, rule: RuleId) -> Option<&T> {
        self.by_family
            .iter()
            .find(|(r, _)| *r == rule)
            .and_then(|(_, f)| f.downcast_ref())
    }

    /// The cluster's platform, when an adapter knows it (None: unknown).
    pub fn platform(&self) -> Option<&Platform> {
        self.platform.as_ref()
    }
}

impl std::fmt::Debug for Facts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut list = f.debug_list();
        list.entries(self.by_family.iter().map(|(rule, _)| rule.as_str()));
        if let Some(platform) = &self.platform {
            list.entry(platform);
        }
        if let Some(reads) = &self.ccm_reads {
            list.entry(&format_args!(
                "ccm-config-source ({} reads)",
                reads.reads().count()
            ));
        }
        list.finish()
    }
}

/// A known-bad input of a family, for the documentation.
#[derive(Debug, Clone)]
pub struct Example {
    /// CREATE for object and cloud-config families, DELETE for a DELETE family.
    pub operation: super::Operation,
    /// The object written or deleted.
    pub object: serde_json::Value,
    /// Facts the family needs for its example.
    pub facts: Facts,
}

impl Example {
    /// A CREATE of `object` without facts.
    pub fn create(object: serde_json::Value) -> Self {
        Example {
            operation: super::Operation::Create,
            object,
            facts: Facts::default(),
        }
    }

    /// A ConfigMap that OpenShift reads its cloud config from, holding `text` (the example
    /// of every cloud-config family).
    pub fn cloud_config(text: &str) -> Self {
        Example::create(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
            "data": {"config": text}}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fact_reaches_the_families_that_declare_it_and_sources_merge() {
        let facts = Facts::of_fact(FactId::CloudConfig, 7_u8);
        for family in FAMILIES {
            assert_eq!(
                facts.get::<u8>(family.id).is_some(),
                family.facts.contains(&FactId::CloudConfig),
                "{}",
                family.id
            );
        }
        let mut merged = Facts::of_platform(Platform::OpenStack);
        merged.merge(facts);
        merged.merge(Facts::of_fact(FactId::CloudConfig, 8_u8));
        merged.merge(Facts::of_platform(Platform::Other("VSphere".into())));
        assert_eq!(merged.platform(), Some(&Platform::OpenStack));
        let reader = FAMILIES
            .iter()
            .find(|f| f.facts.contains(&FactId::CloudConfig))
            .expect("a family reads the cloud-config fact");
        assert_eq!(merged.get::<u8>(reader.id), Some(&7));
    }

    #[test]
    fn ids_are_unique_and_round_trip() {
        let mut seen = std::collections::BTreeSet::new();
        for family in FAMILIES {
            assert!(seen.insert(family.id), "{} twice", family.id);
            assert_eq!(RuleId::parse(family.id.as_str()), Some(family.id));
            assert_eq!(family.id.family().id, family.id);
            assert!(!family.codes.is_empty(), "{} has no codes", family.id);
        }
    }

    #[test]
    fn declared_parameter_names_are_accepted_by_the_parser() {
        let catalog: ReleaseCatalog =
            serde_saphyr::from_str(include_str!("../../policies/release-catalog.yaml"))
                .expect("embedded release catalog");
        for family in FAMILIES {
            for name in family.params {
                let text = format!("params: {{{name}: null}}\n");
                let result = (family.parse_params)(&ParamsInput {
                    policy: "p",
                    text: &text,
                    catalog: &catalog,
                });
                if let Err(e) = result {
                    assert!(
                        !e.contains("unknown field"),
                        "{}: declared parameter {name} is refused: {e}",
                        family.id
                    );
                }
            }
            let unknown = (family.parse_params)(&ParamsInput {
                policy: "p",
                text: "params: {noSuchParameter: 1}\n",
                catalog: &catalog,
            });
            assert!(unknown.is_err(), "{} accepts any parameter", family.id);
        }
    }
}
