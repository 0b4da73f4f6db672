//! Facts about the cluster as data: what a rule family may need to know besides the write,
//! each fact one file with a pure reducer from the objects it is made of and a description
//! of what to watch or list to get them.
//!
//! A family declares the facts it needs ([`crate::rules::Family::facts`]); each face feeds
//! them in its own way, from the same reducers:
//!
//! | face | feeder |
//! |---|---|
//! | `serve` | a watcher per needed fact, started by the composition root only when an enabled policy's family (or the site policy) needs it; every fact source that wants a review contributes |
//! | `check` | the facts reduced from the one parsed input set ([`Collector`]) |
//! | `audit` | a pre-pass: the targets that feed a fact are listed first, reduced ([`Collector`]), then the rest evaluated |
//!
//! The IO (watching, listing, asking OpenStack) stays in the adapters; this module knows no
//! client. A per-review fact (the control-plane guard's load-balancer state, gathered with IO
//! for each Machine DELETE) is declared here too, so that the same "a family declares what it
//! needs" holds for it.

pub mod ccm_config;
pub mod ccm_workload;
pub mod ccm_workloads;
pub mod cloud_config;
pub mod platform;

use std::any::Any;
use std::sync::Arc;

use kube::core::{DynamicObject, GroupVersionKind};

use crate::sites::SitesDocument;

/// A fact a rule family (or the site policy) can need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FactId {
    /// The cluster's cloud-config `[LoadBalancer]` settings ([`cloud_config`]).
    CloudConfig,
    /// The platform the cluster runs on, from OpenShift's `Infrastructure` ([`platform`]).
    Platform,
    /// The state of a control-plane Machine's API load balancer, gathered per Machine DELETE
    /// with IO (Kubernetes, Keystone, Octavia) by the load-balancer guard.
    ControlPlaneLoadBalancer,
    /// Which Secret and ConfigMap keys the cluster's CCM containers read as their cloud
    /// config ([`ccm_config`]), from every Deployment and DaemonSet ([`ccm_workloads`]).
    CcmConfigSource,
}

impl FactId {
    /// Every fact, for tables and tests.
    pub const ALL: &'static [FactId] = &[
        FactId::CloudConfig,
        FactId::Platform,
        FactId::ControlPlaneLoadBalancer,
        FactId::CcmConfigSource,
    ];

    /// Kebab-case name, for logs and documentation.
    pub fn as_str(self) -> &'static str {
        match self {
            FactId::CloudConfig => "cloud-config",
            FactId::Platform => "openshift-platform",
            FactId::ControlPlaneLoadBalancer => "control-plane-load-balancer",
            FactId::CcmConfigSource => "ccm-config-source",
        }
    }

    /// How the fact is fed.
    pub fn feed(self) -> Feed {
        match self {
            FactId::CloudConfig => {
                Feed::Watched(&[cloud_config::SECRETS, cloud_config::CONFIGMAPS])
            }
            FactId::Platform => Feed::Watched(&[platform::INFRASTRUCTURES]),
            FactId::ControlPlaneLoadBalancer => Feed::PerReview,
            FactId::CcmConfigSource => {
                Feed::WatchedAll(&[ccm_workloads::DEPLOYMENTS, ccm_workloads::DAEMONSETS])
            }
        }
    }
}

impl std::fmt::Display for FactId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a fact reaches a review.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// Kept current by watching objects of one of these resources (which one, and which
    /// object, can depend on configuration, e.g. `--cloud-config-object`): `serve` needs
    /// `get`, `list` and `watch` on it.
    Watched(&'static [Resource]),
    /// Kept current by listing and watching every object of each of these resources,
    /// cluster-wide: `serve` needs `list` and `watch` on them, with no `resourceNames` (the
    /// objects that matter cannot be named in advance).
    WatchedAll(&'static [Resource]),
    /// Gathered with IO for each review that needs it, under the review's deadline.
    PerReview,
}

/// A Kubernetes resource a fact is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resource {
    /// API group (`""` for the core group).
    pub group: &'static str,
    /// API version.
    pub version: &'static str,
    /// Kind.
    pub kind: &'static str,
    /// Plural resource name, as RBAC names it.
    pub plural: &'static str,
}

impl Resource {
    /// The group/version/kind.
    pub fn gvk(&self) -> GroupVersionKind {
        GroupVersionKind::gvk(self.group, self.version, self.kind)
    }
}

/// One object a watched fact is made of: a resource, a namespace (None: cluster-scoped) and a
/// name, watched with the field selector `metadata.name=<name>` so that RBAC can grant `get`,
/// `list` and `watch` on that one object with `resourceNames`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watch {
    /// What it is.
    pub resource: Resource,
    /// Its namespace, None when cluster-scoped.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl Watch {
    /// The field selector that selects the one object.
    pub fn field_selector(&self) -> String {
        format!("metadata.name={}", self.name)
    }
}

/// What a watched fact lists and watches: one object by name ([`Watch`]), or every object of
/// a resource in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One object, selected by name.
    Object(Watch),
    /// Every object of the resource, in every namespace.
    All(Resource),
}

impl Target {
    /// The resource listed.
    pub fn resource(&self) -> &Resource {
        match self {
            Target::Object(watch) => &watch.resource,
            Target::All(resource) => resource,
        }
    }

    /// The namespace listed, None when cluster-wide (or the object is cluster-scoped).
    pub fn namespace(&self) -> Option<&str> {
        match self {
            Target::Object(watch) => watch.namespace.as_deref(),
            Target::All(_) => None,
        }
    }

    /// The field selector of the list and watch, None when every object is listed.
    pub fn field_selector(&self) -> Option<String> {
        match self {
            Target::Object(watch) => Some(watch.field_selector()),
            Target::All(_) => None,
        }
    }
}

/// Reduces the facts `needed` from objects seen one at a time in any order (a face's whole
/// input: `check`'s files, `audit`'s listing of the fact-feeding targets), in constant
/// space. What the objects cannot tell stays unknown.
#[derive(Debug)]
pub struct Collector {
    needed: Vec<FactId>,
    cloud_configs: cloud_config::Seen,
}

impl Collector {
    /// A collector of the facts in `needed` (only [`FactId::CloudConfig`] is reduced from a
    /// face's input; the platform and per-review facts are `serve`'s).
    pub fn new(needed: &[FactId]) -> Self {
        Collector {
            needed: needed.to_vec(),
            cloud_configs: cloud_config::Seen::default(),
        }
    }

    /// Whether the collector reduces anything at all.
    pub fn is_empty(&self) -> bool {
        !self.needed.contains(&FactId::CloudConfig)
    }

    /// Adds one object, read from `place` when it has one (`a.yaml`), with the cloud-config
    /// sites of the policy set.
    pub fn add(
        &mut self,
        kind: &GroupVersionKind,
        object: &DynamicObject,
        place: Option<&str>,
        sites: &SitesDocument,
    ) {
        if self.needed.contains(&FactId::CloudConfig) {
            for settings in cloud_config::settings_of(kind, object, place, sites) {
                self.cloud_configs.add(settings);
            }
        }
    }

    /// Every fact the objects told, with `holder` naming where they were found ("this input
    /// holds") and `undecidable` why the face cannot choose when they disagree. A fact the
    /// objects do not tell is left out (unknown).
    pub fn reduced(self, holder: &str, undecidable: &str) -> Vec<Reduced> {
        let mut out: Vec<Reduced> = Vec::new();
        if let Some(fact) = self.cloud_configs.fact(holder, undecidable) {
            out.push((FactId::CloudConfig, Arc::new(fact)));
        }
        out
    }
}

/// One reduced fact, typed by its id (each fact's file names its type).
pub type Reduced = (FactId, Arc<dyn Any + Send + Sync>);

/// A fact kept current by watching objects ([`Target`]: one by name, or every object of a
/// resource): everything the generic watcher of `serve` needs to know about it, as data and
/// pure functions. The watcher lists and watches each target, folds each object into that
/// target's [`WatchedFact::State`] at once (the object itself is never kept) and stores
/// [`WatchedFact::fact`] of the states.
pub trait WatchedFact: Send + Sync + 'static {
    /// The fact.
    type Fact: Clone + std::fmt::Debug + Send + Sync + 'static;
    /// What is kept of one target's objects between events (a reduced value, never an
    /// object): `Default` is "nothing listed".
    type State: Default + Send + 'static;
    /// Which fact it is.
    const ID: FactId;
    /// The stem of the watcher's metrics: `stackgate_<stem>_syncs_total{outcome}` and
    /// `stackgate_<stem>_known`.
    const METRICS: &'static str;
    /// Help of the syncs counter.
    const SYNCS_HELP: &'static str;
    /// Help of the known gauge.
    const KNOWN_HELP: &'static str;
    /// How log lines name the fact (`cloud config`).
    const LOG_LABEL: &'static str;
    /// The name of the watcher's task (`cloud-config watcher`).
    const TASK: &'static str;
    /// What the families do while the fact cannot be read, for the refusal log line.
    const WITHOUT: &'static str;
    /// Whether a refusal (401/403) is logged at error (a misconfiguration that leaves a
    /// family only warning) rather than at warn.
    const REFUSAL_IS_ERROR: bool;

    /// What to list and watch, each with a state of its own.
    fn targets(&self) -> Vec<Target>;
    /// What is watched, for log lines (never its content).
    fn describe(&self) -> String;
    /// Folds one stored version of an object of `resource` into `state`; whether the state
    /// changed (an unchanged state is not stored again).
    fn apply(&self, resource: &Resource, state: &mut Self::State, object: &DynamicObject) -> bool;
    /// Removes a deleted object of `resource` from `state`; whether the state changed.
    fn delete(&self, resource: &Resource, state: &mut Self::State, object: &DynamicObject) -> bool;
    /// The fact the states of every target give (in [`WatchedFact::targets`] order), once
    /// each has been listed completely.
    fn fact(&self, states: &[Self::State]) -> Self::Fact;
    /// The fact when the API server refuses to show the objects (HTTP `code`).
    fn refused(&self, code: u16) -> Self::Fact;
    /// The fact when the API server does not serve the resource at all (404 on list or
    /// watch); the watch then ends. None: a 404 is an error like any other, retried.
    fn not_served(&self) -> Option<Self::Fact> {
        None
    }
    /// Whether `fact` is known (the `known` gauge).
    fn is_known(fact: &Self::Fact) -> bool;
}

/// The fact of a one-object watch: the object's reduced version, or `absent` when the list
/// did not hold it or it was deleted.
fn one_object<F: Clone>(states: &[Option<F>], absent: impl FnOnce() -> F) -> F {
    states
        .first()
        .and_then(Option::clone)
        .unwrap_or_else(absent)
}

impl WatchedFact for cloud_config::ConfigObject {
    type Fact = cloud_config::CloudConfigFact;
    type State = Option<Self::Fact>;
    const ID: FactId = FactId::CloudConfig;
    const METRICS: &'static str = "cloud_config";
    const SYNCS_HELP: &'static str =
        "Cloud-config object watcher outcomes: lists, events, deletion, refusals, errors";
    const KNOWN_HELP: &'static str =
        "1 while the configured cloud config is read and valid for the rules, else 0";
    const LOG_LABEL: &'static str = "cloud config";
    const TASK: &'static str = "cloud-config watcher";
    const WITHOUT: &'static str = "rules that need it warn that they cannot see it";
    const REFUSAL_IS_ERROR: bool = true;

    fn targets(&self) -> Vec<Target> {
        vec![Target::Object(cloud_config::ConfigObject::watch(self))]
    }
    fn describe(&self) -> String {
        cloud_config::ConfigObject::describe(self)
    }
    fn apply(&self, _: &Resource, state: &mut Self::State, object: &DynamicObject) -> bool {
        *state = Some(self.fact_of(object));
        true
    }
    fn delete(&self, _: &Resource, state: &mut Self::State, _: &DynamicObject) -> bool {
        *state = None;
        true
    }
    fn fact(&self, states: &[Self::State]) -> Self::Fact {
        one_object(states, || cloud_config::ConfigObject::absent(self))
    }
    fn refused(&self, code: u16) -> Self::Fact {
        cloud_config::ConfigObject::refused(self, code)
    }
    fn is_known(fact: &Self::Fact) -> bool {
        matches!(fact, cloud_config::CloudConfigFact::Known(s) if s.readable)
    }
}

impl WatchedFact for platform::Infrastructure {
    type Fact = platform::PlatformFact;
    type State = Option<Self::Fact>;
    const ID: FactId = FactId::Platform;
    const METRICS: &'static str = "openshift_platform";
    const SYNCS_HELP: &'static str = "OpenShift Infrastructure watcher outcomes: lists, events, \
                                      deletion, refusals, absent API, errors";
    const KNOWN_HELP: &'static str =
        "1 while the cluster's platform is known from the OpenShift Infrastructure object";
    const LOG_LABEL: &'static str = "openshift platform";
    const TASK: &'static str = "openshift-platform watcher";
    const WITHOUT: &'static str = "cloud configs are judged by their content alone";
    const REFUSAL_IS_ERROR: bool = false;

    fn targets(&self) -> Vec<Target> {
        vec![Target::Object(platform::watch())]
    }
    fn describe(&self) -> String {
        format!("Infrastructure {}", platform::INFRASTRUCTURE_NAME)
    }
    fn apply(&self, _: &Resource, state: &mut Self::State, object: &DynamicObject) -> bool {
        *state = Some(platform::PlatformFact::of_infrastructure(object));
        true
    }
    fn delete(&self, _: &Resource, state: &mut Self::State, _: &DynamicObject) -> bool {
        *state = None;
        true
    }
    fn fact(&self, states: &[Self::State]) -> Self::Fact {
        one_object(states, || {
            platform::PlatformFact::Unknown("Infrastructure cluster does not exist".to_owned())
        })
    }
    fn refused(&self, code: u16) -> Self::Fact {
        platform::PlatformFact::Unknown(format!(
            "Infrastructure cluster cannot be read by stackgate (HTTP {code}: RBAC)"
        ))
    }
    fn not_served(&self) -> Option<Self::Fact> {
        Some(platform::PlatformFact::Unknown(
            "infrastructures.config.openshift.io is not served".to_owned(),
        ))
    }
    fn is_known(fact: &Self::Fact) -> bool {
        fact.platform().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watched fact's name is its readiness gate on `/readyz` and its watcher's metric
    /// stem: both are kept from before the facts were data (operators' probes and alerts
    /// name them).
    #[test]
    fn watched_facts_keep_their_gate_and_metric_names() {
        assert_eq!(
            <cloud_config::ConfigObject as WatchedFact>::ID.to_string(),
            "cloud-config"
        );
        assert_eq!(
            <cloud_config::ConfigObject as WatchedFact>::METRICS,
            "cloud_config"
        );
        assert_eq!(
            <platform::Infrastructure as WatchedFact>::ID.to_string(),
            "openshift-platform"
        );
        assert_eq!(
            <platform::Infrastructure as WatchedFact>::METRICS,
            "openshift_platform"
        );
        let names: std::collections::BTreeSet<&str> =
            FactId::ALL.iter().map(|f| f.as_str()).collect();
        assert_eq!(names.len(), FactId::ALL.len(), "fact names are unique");
    }
}
