//! The `CcmConfigSource` fact in `serve`: which Secret and ConfigMap keys the cluster's CCM
//! containers read as their `--cloud-config`, so that a write of one of them is judged as a
//! cloud-config site whatever its name (patched when `provider-requires-serial-api-calls` is
//! missing, denied when it is `false`), with a note naming the workload that reads it.
//!
//! The fact, its fold and what to watch are data in [`crate::facts::ccm_workloads`]: every
//! Deployment and DaemonSet, cluster-wide, reduced at once to its CCM containers' reads by
//! the generic [`crate::fact_watcher`] (never kept; at most `MAX_READS` keys). The current fact
//! is kept in a [`CcmConfigCell`]; [`CcmConfigSource`] hands it to Secret and ConfigMap
//! reviews as [`Facts::of_ccm_reads`] (an `Arc` clone, no IO on the request path).
//!
//! The CCM recognition (`ccmImages`, `ccmArgs`) is the policy set's at start: the engine
//! snapshot the server swaps at run time changes only the release data, never the policies,
//! so it cannot go stale; new policies mean a new process (the chart rolls the pods when the
//! policy ConfigMap changes).
//!
//! Until the first complete list of both resources the fact is unknown and nothing is added:
//! the `ccm-config-source` readiness gate holds `/readyz` until then. A refusal (no RBAC for
//! `apps`) opens the gate too, logged at error with `stackgate_ccm_config_source_known 0`:
//! the named and labelled sites are still checked, the derived ones are not.

use std::sync::Arc;

use crate::admission::{FactSource, Gather, KnownFacts, Webhook, body_mentions};
use crate::engine::{Engine, Facts};
use crate::fact_watcher::FactCell;
pub use crate::facts::ccm_workloads::{CcmConfigFact, CcmWorkloads};

/// The current `CcmConfigSource` fact, shared by the watcher (writer) and the fact source
/// (readers). Starts unknown ("not listed yet").
pub type CcmConfigCell = FactCell<CcmConfigFact>;

impl Default for FactCell<CcmConfigFact> {
    fn default() -> Self {
        FactCell::holding(CcmConfigFact::not_listed_yet())
    }
}

/// The `CcmConfigSource` fact as a [`FactSource`]: wants Secret and ConfigMap reviews while
/// some CCM workload is known to read a config object, and answers from the cell at once.
#[derive(Debug, Clone)]
pub struct CcmConfigSource {
    cell: CcmConfigCell,
}

impl CcmConfigSource {
    /// The source over `cell` (filled by [`crate::fact_watcher::run`] over [`CcmWorkloads`]).
    pub fn new(cell: CcmConfigCell) -> Self {
        CcmConfigSource { cell }
    }
}

impl FactSource for CcmConfigSource {
    fn wants(&self, _webhook: Webhook, body: &[u8], _engine: &Engine) -> Option<Arc<dyn Gather>> {
        let fact = self.cell.get();
        let reads = fact.reads().filter(|reads| !reads.is_empty())?;
        // Cheap: a Secret or ConfigMap review names its kind.
        if !body_mentions(body, b"\"Secret\"") && !body_mentions(body, b"\"ConfigMap\"") {
            return None;
        }
        Some(Arc::new(KnownFacts(Facts::of_ccm_reads(Arc::clone(reads)))))
    }
}
