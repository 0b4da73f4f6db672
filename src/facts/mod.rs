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

pub mod cloud_config;
pub mod platform;

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
}

impl FactId {
    /// Every fact, for tables and tests.
    pub const ALL: &'static [FactId] = &[
        FactId::CloudConfig,
        FactId::Platform,
        FactId::ControlPlaneLoadBalancer,
    ];

    /// Kebab-case name, for logs and documentation.
    pub fn as_str(self) -> &'static str {
        match self {
            FactId::CloudConfig => "cloud-config",
            FactId::Platform => "openshift-platform",
            FactId::ControlPlaneLoadBalancer => "control-plane-load-balancer",
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

    /// The cloud-config fact, with `holder` naming where the configs were found ("this input
    /// holds") and `undecidable` why the face cannot choose when they disagree.
    pub fn cloud_config(
        self,
        holder: &str,
        undecidable: &str,
    ) -> Option<cloud_config::CloudConfigFact> {
        self.cloud_configs.fact(holder, undecidable)
    }
}
