//! The cluster's cloud config as a fact, for families that judge other objects by it
//! (`ovn-source-ranges` judges a Service by the cluster's `[LoadBalancer]` settings).
//!
//! One configured Secret or ConfigMap (`serve --cloud-config-object Secret/kube-system/cloud-config
//! --cloud-config-key cloud.conf`) is watched by name ([`watcher`]: list and watch with a
//! `metadata.name` field selector, so RBAC can grant `get`/`list`/`watch` on that one object
//! with `resourceNames`). Each version is reduced at once to the few settings the families read
//! ([`LbSettings`]); the text is dropped, never logged. The current fact is kept in a
//! [`ConfigFactCell`]; [`CloudConfigSource`] is the [`FactSource`] that hands it to the engine
//! for Service reviews, with no IO on the request path.

pub mod watcher;

use std::sync::Arc;

use crate::admission::{FactSource, Gather, KnownFacts, Webhook, body_mentions};
use crate::engine::{Engine, Facts};
use crate::fact_watcher::FactCell;
use crate::facts::FactId;
pub use crate::facts::cloud_config::{
    CloudConfigFact, ConfigObject, ConfigObjectError, DEFAULT_KEY, LbSettings,
};

/// The current cloud-config fact, shared by the watcher (writer) and the fact source
/// (readers). Starts as unavailable ("not read yet").
pub type ConfigFactCell = FactCell<CloudConfigFact>;

impl FactCell<CloudConfigFact> {
    /// A cell for `object`, not read yet.
    pub fn new(object: &ConfigObject) -> Self {
        FactCell::holding(object.not_read_yet())
    }
}

/// The cloud-config fact as a [`FactSource`]: wants Service reviews that may be of type
/// LoadBalancer while an enabled policy's family reads the fact, and answers from the cell at
/// once.
#[derive(Debug, Clone)]
pub struct CloudConfigSource {
    cell: ConfigFactCell,
}

impl CloudConfigSource {
    /// The source over `cell` (filled by [`watcher::run`]).
    pub fn new(cell: ConfigFactCell) -> Self {
        CloudConfigSource { cell }
    }
}

impl FactSource for CloudConfigSource {
    fn wants(&self, _webhook: Webhook, body: &[u8], engine: &Engine) -> Option<Arc<dyn Gather>> {
        // Cheap: a Service review of type LoadBalancer names both words.
        if !body_mentions(body, b"\"Service\"") || !body_mentions(body, b"LoadBalancer") {
            return None;
        }
        if !engine.policies().family_needs(FactId::CloudConfig) {
            return None;
        }
        let fact = (*self.cell.get()).clone();
        Some(Arc::new(KnownFacts(Facts::of_fact(
            FactId::CloudConfig,
            fact,
        ))))
    }
}
