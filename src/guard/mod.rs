//! The IO adapter of the control-plane load-balancer guard (policy rule
//! `control-plane-lb-guard`, decided purely in [`crate::rules::lb_guard`]).
//!
//! For a control-plane Machine DELETE on `/validate` (recognised by [`probe`]), before the
//! engine evaluates the review, [`Guard::gather`] collects the facts within the request's
//! deadline:
//!
//! ```text
//! Machine (oldObject, or read from the API when the review has none)
//!   ─ cluster-name label ─► ledger: this replica's recent admissions for the cluster (+ record this one)
//!   ─► Cluster ─ spec.infrastructureRef ─► OpenStackCluster
//!   status.apiServerLoadBalancer.id (v1beta1) | status.apiServerManagedLoadBalancer.id (v1beta2)
//!   ─► Machines of the cluster with the control-plane label: those with a deletionTimestamp
//!   spec.identityRef {type, name, cloudName, region}
//!     ─► (type ClusterIdentity: OpenStackClusterIdentity ─► spec.secretRef, namespaceSelector)
//!     ─► Secret: clouds.yaml (+ cacert)
//!     ─► Keystone v3 POST /v3/auth/tokens (token cached) ─► catalog: load-balancer endpoint
//!     ─► Octavia GET /v2/lbaas/loadbalancers/{id}/status (a cached tree only when it refuses)
//! ```
//!
//! Every failure becomes [`GuardFacts::Unavailable`] with a reason that names what failed and
//! never a credential; the policy's `params.unknown` then decides. Nothing here panics or
//! retries past the deadline (the bounds of each call are listed in `openstack.rs`).
//!
//! Several deletions at once: the other control-plane Machines with a deletionTimestamp, and
//! the ones this replica admitted moments ago (`ledger.rs`), count as leaving. A review
//! records its Machine before it is answered and releases it when it is denied
//! ([`Guard::settle`]); a dry run records nothing.
//!
//! Kubernetes access: `get` on `clusters.cluster.x-k8s.io` and `machines` (plus `list` on
//! `machines`), `openstackclusters` and `openstackclusteridentities`
//! (`infrastructure.cluster.x-k8s.io`), `namespaces` (an identity's namespaceSelector) and
//! the identity `secrets` (the chart grants these only with `controlPlaneGuard.enabled`).

mod cache;
mod clouds;
mod cluster;
mod error;
mod ledger;
mod masked_url;
mod metrics;
mod openstack;
mod probe;
mod source;

use std::time::Duration;

use rustls::RootCertStore;
use tokio::time::{Instant, timeout_at};

pub use clouds::mask_url;
pub use clouds::{CloudAuth, Redacted};
pub use cluster::MAX_CONTROL_PLANE_MACHINES;
pub use error::{CloudsError, GuardError, OpenStackError, Service};
pub use ledger::{ADMITTED_TTL, MAX_CLUSTERS, MAX_LEDGER_BYTES, MAX_PER_CLUSTER};
pub use metrics::{
    CacheLabels, CallLabels, DecisionLabels, ErrorLabels, GuardMetrics, UnavailableLabels, outcome,
};
pub use openstack::{CACHE_ENTRIES, MAX_BODY_BYTES, parse_status_tree};
pub use probe::{MachineDelete, probe};
pub use source::GuardSource;

use crate::rules::lb_guard::{self, GuardFacts, Leaving, LeavingWhy, Observation};
use crate::short_text::ShortText;
use ledger::{ClusterKey, Ledger, Reservation};

/// Default `--openstack-timeout`.
pub const DEFAULT_OPENSTACK_TIMEOUT: Duration = Duration::from_millis(800);
/// Default `--octavia-cache-ttl`.
pub const DEFAULT_OCTAVIA_CACHE_TTL: Duration = Duration::from_secs(5);

/// Guard settings (the `stackgate serve` guard flags fill them when `--lb-guard on`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardConfig {
    /// Deadline of each Keystone or Octavia call.
    pub openstack_timeout: Duration,
    /// Status-tree cache lifetime (zero: no cache). A cached tree only ever serves a refusal.
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
    ledger: Ledger,
}

/// The deletion a gathering recorded as admitted (if any): hand it to [`Guard::settle`] once
/// the verdict is known.
#[derive(Debug, Default)]
#[must_use = "settle it with the verdict, or the deletion counts as admitted until it expires"]
pub struct Reserved(Option<Reservation>);

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
            ledger: Ledger::default(),
        }
    }

    /// The guard's metrics; register them with [`GuardMetrics::register`] at start-up.
    pub fn metrics(&self) -> &GuardMetrics {
        &self.metrics
    }

    /// Gathers the facts for `machine`, returning by `deadline` whatever happens. The deletion
    /// stays recorded as admitted (unless a dry run) until it expires: use
    /// [`Self::gather_reserving`] to release it when the review is denied.
    pub async fn gather(&self, machine: &MachineDelete, deadline: Instant) -> GuardFacts {
        let (facts, reserved) = self.gather_reserving(machine, deadline).await;
        drop(reserved);
        facts
    }

    /// [`Self::gather`], also returning the record of this deletion for [`Self::settle`].
    pub async fn gather_reserving(
        &self,
        machine: &MachineDelete,
        deadline: Instant,
    ) -> (GuardFacts, Reserved) {
        let started = Instant::now();
        let mut reservation = None;
        let result = match timeout_at(
            deadline,
            self.try_gather(machine, deadline, &mut reservation),
        )
        .await
        {
            Ok(result) => result,
            Err(_) => Err(GuardError::Deadline),
        };
        self.metrics.gathered(started.elapsed().as_secs_f64());
        let facts = match result {
            Ok(facts) => {
                tracing::debug!(
                    namespace = %ShortText::name(&machine.namespace),
                    machine = %ShortText::name(&machine.name),
                    facts = facts_kind(&facts),
                    dry_run = machine.dry_run,
                    "load-balancer facts gathered"
                );
                facts
            }
            Err(error) => self.unavailable(machine, &error),
        };
        (facts, Reserved(reservation))
    }

    /// Settles a gathering's record once the verdict is known: a denied deletion is released
    /// (it will not happen); an admitted one stays until it expires.
    pub fn settle(&self, reserved: Reserved, denied: bool) {
        if let (Some(reservation), true) = (reserved.0, denied) {
            self.ledger.release(&reservation);
        }
    }

    /// Records and returns [`GuardFacts::Unavailable`] for `error`.
    pub fn unavailable(&self, machine: &MachineDelete, error: &GuardError) -> GuardFacts {
        self.metrics.unavailable(error.metric_reason());
        tracing::warn!(
            namespace = %ShortText::name(&machine.namespace),
            machine = %ShortText::name(&machine.name),
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
        reserved: &mut Option<Reservation>,
    ) -> Result<GuardFacts, GuardError> {
        let (cluster_name, me, read_from_api) = match &machine.machine {
            Some(identity) => (machine.cluster.clone(), identity.clone(), false),
            None => match cluster::read_machine(&self.client, machine, deadline).await? {
                Some((cluster, identity)) => (cluster, identity, true),
                None => {
                    return Ok(GuardFacts::NotApplicable {
                        reason: format!(
                            "Machine {}/{} is not a control-plane Machine",
                            ShortText::name(&machine.namespace),
                            ShortText::name(&machine.name)
                        ),
                    });
                }
            },
        };
        let cluster_name = cluster_name.ok_or(GuardError::NoClusterName)?;
        // Recorded first, under the same lock as reading the others: of two concurrent
        // reviews the later one always counts the earlier one, whatever the calls below cost.
        let key = ClusterKey::new(&machine.namespace, &cluster_name);
        let (admitted, reservation) =
            self.ledger
                .reserve(&key, &me, machine.dry_run, Instant::now());
        reserved.clone_from(&reservation);
        let resolved = MachineDelete {
            cluster: Some(cluster_name.clone()),
            ..machine.clone()
        };
        let target = match cluster::resolve(&self.client, &resolved, deadline).await? {
            cluster::Resolved::NotApplicable(reason) => {
                if let Some(reservation) = reserved.take() {
                    self.ledger.release(&reservation);
                }
                return Ok(GuardFacts::NotApplicable { reason });
            }
            cluster::Resolved::Guard(target) => target,
        };
        let deleting =
            cluster::deleting_machines(&self.client, machine, &cluster_name, deadline).await?;
        let identity = cluster::identity(&self.client, &target, deadline).await?;
        let mut leaving: Vec<Leaving> = deleting
            .into_iter()
            .map(|machine| Leaving {
                machine: machine.digest(),
                name: Some(ShortText::name(&machine.name)),
                why: LeavingWhy::Deleting,
            })
            .collect();
        for machine in admitted {
            if !leaving.iter().any(|l| l.machine.name == machine.name) {
                leaving.push(Leaving {
                    machine,
                    name: None,
                    why: LeavingWhy::JustAdmitted,
                });
            }
        }
        let mut observation = Observation {
            load_balancer: Default::default(),
            machine: read_from_api.then(|| me.clone()),
            leaving,
        };
        // A cached tree may only make a refusal faster: one that would admit is read again.
        let mut status = self
            .openstack
            .load_balancer(&identity, &target.lb_id, deadline, |cached| {
                let candidate = Observation {
                    load_balancer: cached.clone(),
                    machine: None,
                    leaving: observation.leaving.clone(),
                };
                lb_guard::refuses(&me, &candidate)
            })
            .await?;
        if status.id.is_empty() {
            status.id.clone_from(&target.lb_id);
        }
        observation.load_balancer = status;
        Ok(GuardFacts::Observed(observation))
    }
}

fn facts_kind(facts: &GuardFacts) -> &'static str {
    match facts {
        GuardFacts::NotApplicable { .. } => "not_applicable",
        GuardFacts::Observed(_) => "observed",
        GuardFacts::Unavailable { .. } => "unavailable",
    }
}
