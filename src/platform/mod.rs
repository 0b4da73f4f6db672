//! The cluster's platform as a fact: on OpenShift, `openshift-config/cloud-provider-config` is
//! a cloud-config site of every platform, and an OpenStack one only when the cluster runs on
//! OpenStack.
//!
//! The cluster-scoped `Infrastructure` object `cluster` (`config.openshift.io/v1`) reports the
//! platform in `status.platformStatus.type`, falling back to the deprecated `status.platform`
//! (openshift/api `config/v1/types_infrastructure.go`). [`watcher`] watches that one object by
//! name and keeps only the platform type in a [`PlatformCell`]; [`PlatformSource`] hands it to
//! the engine as [`Facts::of_platform`] for ConfigMap reviews, with no IO on the request path.
//!
//! The fact only removes sites: a known platform other than OpenStack makes the
//! `otherPlatforms` sites not sites (no finding, no patch). OpenStack, or unknown (not
//! OpenShift, no permission, not read yet), leaves today's content-based decision, so a
//! config that is not an OpenStack CCM config is never mutated whatever the fact says.

pub mod watcher;

use std::sync::Arc;

use arc_swap::ArcSwap;
use kube::core::DynamicObject;

use crate::admission::{FactSource, Gather, KnownFacts, Webhook, body_mentions};
use crate::engine::{Engine, Facts, Platform};

/// The name of the one `Infrastructure` object OpenShift keeps.
pub const INFRASTRUCTURE_NAME: &str = "cluster";

/// What stackgate knows about the cluster's platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlatformFact {
    /// The `Infrastructure` object reports this platform.
    Known(Platform),
    /// Unknown, and why (not read yet, not OpenShift, forbidden, no type reported).
    Unknown(String),
}

impl PlatformFact {
    /// The fact one stored version of the `Infrastructure` object gives.
    pub fn of_infrastructure(object: &DynamicObject) -> Self {
        let status = object.data.get("status");
        let reported = status
            .and_then(|s| s.get("platformStatus"))
            .and_then(|p| p.get("type"))
            .and_then(serde_json::Value::as_str)
            .filter(|t| !t.is_empty())
            .or_else(|| {
                status
                    .and_then(|s| s.get("platform"))
                    .and_then(serde_json::Value::as_str)
                    .filter(|t| !t.is_empty())
            });
        match reported {
            Some(platform_type) => PlatformFact::Known(Platform::from_type(platform_type)),
            None => PlatformFact::Unknown(
                "Infrastructure cluster reports no platform type yet".to_owned(),
            ),
        }
    }

    /// The known platform, if any.
    pub fn platform(&self) -> Option<&Platform> {
        match self {
            PlatformFact::Known(p) => Some(p),
            PlatformFact::Unknown(_) => None,
        }
    }
}

/// The current platform fact, shared by the watcher (writer) and the fact source (readers).
/// Starts unknown ("not read yet").
#[derive(Debug, Clone)]
pub struct PlatformCell(Arc<ArcSwap<PlatformFact>>);

impl Default for PlatformCell {
    fn default() -> Self {
        PlatformCell(Arc::new(ArcSwap::from_pointee(PlatformFact::Unknown(
            "Infrastructure cluster has not been read yet".to_owned(),
        ))))
    }
}

impl PlatformCell {
    /// The current fact.
    pub fn get(&self) -> Arc<PlatformFact> {
        self.0.load_full()
    }

    /// Replaces the fact.
    pub fn set(&self, fact: PlatformFact) {
        self.0.store(Arc::new(fact));
    }
}

/// The platform fact as a [`FactSource`]: wants ConfigMap reviews (the shared sites are
/// ConfigMaps) while the platform is known, and answers from the cell at once. Register it
/// after the other sources: the server asks the first source that wants a review.
#[derive(Debug, Clone)]
pub struct PlatformSource {
    cell: PlatformCell,
}

impl PlatformSource {
    /// The source over `cell` (filled by [`watcher::run`]).
    pub fn new(cell: PlatformCell) -> Self {
        PlatformSource { cell }
    }
}

impl FactSource for PlatformSource {
    fn wants(&self, _webhook: Webhook, body: &[u8], _engine: &Engine) -> Option<Arc<dyn Gather>> {
        let fact = self.cell.get();
        let platform = fact.platform()?.clone();
        // Cheap: a ConfigMap review names its kind.
        if !body_mentions(body, b"\"ConfigMap\"") {
            return None;
        }
        Some(Arc::new(KnownFacts(Facts::of_platform(platform))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn infrastructure(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "config.openshift.io/v1",
            "kind": "Infrastructure", "metadata": {"name": "cluster"}, "status": status}))
        .unwrap()
    }

    #[test]
    fn platform_status_type_first_then_the_deprecated_field() {
        let both = infrastructure(json!({"platform": "OpenStack",
            "platformStatus": {"type": "VSphere"}}));
        assert_eq!(
            PlatformFact::of_infrastructure(&both),
            PlatformFact::Known(Platform::Other("VSphere".into()))
        );
        let old = infrastructure(json!({"platform": "OpenStack"}));
        assert_eq!(
            PlatformFact::of_infrastructure(&old),
            PlatformFact::Known(Platform::OpenStack)
        );
        let none = infrastructure(json!({"platformStatus": {"type": ""}}));
        assert!(PlatformFact::of_infrastructure(&none).platform().is_none());
    }
}
