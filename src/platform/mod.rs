//! The cluster's platform as a fact: on OpenShift, `openshift-config/cloud-provider-config` is
//! a cloud-config site of every platform, and an OpenStack one only when the cluster runs on
//! OpenStack.
//!
//! The fact itself, its reducer and what to watch are data in [`crate::facts::platform`]
//! (`Infrastructure/cluster`, `config.openshift.io/v1`). [`watcher`] watches that one object by
//! name and keeps only the platform type in a [`PlatformCell`]; [`PlatformSource`] hands it to
//! the engine as [`Facts::of_platform`] for ConfigMap reviews, with no IO on the request path.
//!
//! The fact only removes sites: a known platform other than OpenStack makes the
//! `otherPlatforms` sites not sites (no finding, no patch). OpenStack, or unknown (not
//! OpenShift, no permission, not read yet), leaves today's content-based decision, so a
//! config that is not an OpenStack CCM config is never mutated whatever the fact says.

pub mod watcher;

use std::sync::Arc;

use crate::admission::{FactSource, Gather, KnownFacts, Webhook, body_mentions};
use crate::engine::{Engine, Facts};
use crate::fact_watcher::FactCell;
pub use crate::facts::platform::{INFRASTRUCTURE_NAME, PlatformFact};

/// The current platform fact, shared by the watcher (writer) and the fact source (readers).
/// Starts unknown ("not read yet").
pub type PlatformCell = FactCell<PlatformFact>;

impl Default for FactCell<PlatformFact> {
    fn default() -> Self {
        FactCell::holding(PlatformFact::Unknown(
            "Infrastructure cluster has not been read yet".to_owned(),
        ))
    }
}

/// The platform fact as a [`FactSource`]: wants ConfigMap reviews (the shared sites are
/// ConfigMaps) while the platform is known, and answers from the cell at once. Every source
/// that wants a review contributes ([`crate::admission::AllOf`]).
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
