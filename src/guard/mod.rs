//! The IO adapter of the control-plane load-balancer guard (policy rule
//! `control-plane-lb-guard`, decided purely in [`crate::rules::lb_guard`]).
//!
//! For a control-plane Machine DELETE on `/validate` (recognised by [`probe`]), before the
//! engine evaluates the review, [`Guard::gather`] collects the facts within the request's
//! deadline:
//!
//! ```text
//! Machine (oldObject) ─ cluster-name label ─► Cluster ─ spec.infrastructureRef ─► OpenStackCluster
//!   status.apiServerLoadBalancer.id (v1beta1) | status.apiServerManagedLoadBalancer.id (v1beta2)
//!   spec.identityRef {name, cloudName, region} ─► Secret: clouds.yaml (+ cacert)
//!     ─► Keystone v3 POST /v3/auth/tokens (token cached) ─► catalog: load-balancer endpoint
//!     ─► Octavia GET /v2/lbaas/loadbalancers/{id}/status (cached for a few seconds)
//! ```
//!
//! Every failure becomes [`GuardFacts::Unavailable`] with a reason that names what failed and
//! never a credential; the policy's `params.unknown` then decides. Nothing here panics or
//! retries past the deadline (the bounds of each call are listed in `openstack.rs`).
//!
//! Kubernetes access: `get` on `clusters.cluster.x-k8s.io`,
//! `openstackclusters.infrastructure.cluster.x-k8s.io` and the identity `secrets` (the chart
//! grants these only with `controlPlaneGuard.enabled`).

mod cache;
mod clouds;
mod cluster;
mod error;
mod metrics;
mod openstack;
mod probe;
mod source;

use std::time::Duration;

use rustls::RootCertStore;
use tokio::time::{Instant, timeout_at};

pub use clouds::{CloudAuth, Redacted};
pub use error::{CloudsError, GuardError, OpenStackError, Service};
pub use metrics::{GuardMetrics, outcome};
pub use openstack::{CACHE_ENTRIES, MAX_BODY_BYTES, parse_status_tree};
pub use probe::{MachineDelete, probe};
pub use source::GuardSource;

use crate::rules::lb_guard::GuardFacts;

/// Default `--openstack-timeout`.
pub const DEFAULT_OPENSTACK_TIMEOUT: Duration = Duration::from_millis(800);
/// Default `--octavia-cache-ttl`.
pub const DEFAULT_OCTAVIA_CACHE_TTL: Duration = Duration::from_secs(5);

/// Guard settings (the `stackgate serve` guard flags fill them when `--lb-guard on`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardConfig {
    /// Deadline of each Keystone or Octavia call.
    pub openstack_timeout: Duration,
    /// Status-tree cache lifetime (zero: no cache).
    pub octavia_cache_ttl: Duration,
    /// Trust the system's root certificates (besides each identity Secret's `cacert`).
    pub system_roots: bool,
}

impl Default for GuardConfig {
    fn default() -> Self {
        Self {
            openstack_timeout: DEFAULT_OPENSTACK_TIMEOUT,
            octavia_cache_ttl: DEFAULT_OCTAVIA_CACHE_TTL,
            system_roots: true,
        }
    }
}

/// The guard: a Kubernetes client, the OpenStack client with its caches, and its metrics.
/// Build one at start-up and share it (`Arc`).
pub struct Guard {
    client: kube::Client,
    openstack: openstack::OpenStack,
    metrics: GuardMetrics,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("openstack", &self.openstack)
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// A guard reading Kubernetes objects through `client`. Loads the system root
    /// certificates once (when `config.system_roots`); certificates that fail to load are
    /// logged and skipped.
    pub fn new(client: kube::Client, config: GuardConfig) -> Self {
        let mut roots = RootCertStore::empty();
        if config.system_roots {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!(%error, "a system root certificate could not be loaded");
            }
            let (added, skipped) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(added, skipped, "system root certificates for OpenStack");
        }
        let metrics = GuardMetrics::default();
        Self {
            client,
            openstack: openstack::OpenStack::new(
                roots,
                config.openstack_timeout,
                config.octavia_cache_ttl,
                metrics.clone(),
            ),
            metrics,
        }
    }

    /// The guard's metrics; register them with [`GuardMetrics::register`] at start-up.
    pub fn metrics(&self) -> &GuardMetrics {
        &self.metrics
    }

    /// Gathers the facts for `machine`, returning by `deadline` whatever happens.
    pub async fn gather(&self, machine: &MachineDelete, deadline: Instant) -> GuardFacts {
        let started = Instant::now();
        let result = match timeout_at(deadline, self.try_gather(machine, deadline)).await {
            Ok(result) => result,
            Err(_) => Err(GuardError::Deadline),
        };
        self.metrics.gathered(started.elapsed().as_secs_f64());
        match result {
            Ok(facts) => {
                tracing::debug!(
                    namespace = %machine.namespace,
                    machine = %machine.name,
                    facts = facts_kind(&facts),
                    "load-balancer facts gathered"
                );
                facts
            }
            Err(error) => self.unavailable(machine, &error),
        }
    }

    /// Records and returns [`GuardFacts::Unavailable`] for `error`.
    pub fn unavailable(&self, machine: &MachineDelete, error: &GuardError) -> GuardFacts {
        self.metrics.unavailable(error.metric_reason());
        tracing::warn!(
            namespace = %machine.namespace,
            machine = %machine.name,
            reason = error.metric_reason(),
            %error,
            "load-balancer facts unavailable"
        );
        GuardFacts::Unavailable {
            reason: error.to_string(),
        }
    }

    async fn try_gather(
        &self,
        machine: &MachineDelete,
        deadline: Instant,
    ) -> Result<GuardFacts, GuardError> {
        let target = match cluster::resolve(&self.client, machine, deadline).await? {
            cluster::Resolved::NotApplicable(reason) => {
                return Ok(GuardFacts::NotApplicable { reason });
            }
            cluster::Resolved::Guard(target) => target,
        };
        let identity = cluster::identity(&self.client, &target, deadline).await?;
        let mut status = self
            .openstack
            .load_balancer(&identity, &target.lb_id, deadline)
            .await?;
        if status.id.is_empty() {
            status.id.clone_from(&target.lb_id);
        }
        Ok(GuardFacts::Observed(status))
    }
}

fn facts_kind(facts: &GuardFacts) -> &'static str {
    match facts {
        GuardFacts::NotApplicable { .. } => "not_applicable",
        GuardFacts::Observed(_) => "observed",
        GuardFacts::Unavailable { .. } => "unavailable",
    }
}
