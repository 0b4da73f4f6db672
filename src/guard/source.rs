//! The guard as a fact source: control-plane Machine DELETEs on `/validate`, while an
//! enabled policy's family needs [`FactId::ControlPlaneLoadBalancer`] (the
//! `control-plane-lb-guard` family declares it), gather the API load balancer's state before
//! the engine evaluates them, per review and with IO.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Instant;

use super::{Guard, GuardError, MachineDelete, Reserved};
use crate::admission::{FactSource, Gather, Gathered, Webhook};
use crate::engine::{Engine, Facts};
use crate::facts::FactId;
use crate::rules::lb_guard::GuardFacts;

/// The guard, registered with the server as a [`FactSource`].
#[derive(Debug, Clone)]
pub struct GuardSource(Arc<Guard>);

impl GuardSource {
    /// Wraps a guard.
    pub fn new(guard: Arc<Guard>) -> Self {
        GuardSource(guard)
    }
}

impl FactSource for GuardSource {
    fn wants(&self, webhook: Webhook, body: &[u8], engine: &Engine) -> Option<Arc<dyn Gather>> {
        // The guard only ever denies: the mutating webhook has nothing to do with its facts.
        if webhook != Webhook::Validate {
            return None;
        }
        let machine = super::probe(body)?;
        if !engine
            .policies()
            .family_needs(FactId::ControlPlaneLoadBalancer)
        {
            return None;
        }
        Some(Arc::new(MachineGather {
            guard: Arc::clone(&self.0),
            machine,
        }))
    }
}

/// The facts of one control-plane Machine DELETE, being gathered.
struct MachineGather {
    guard: Arc<Guard>,
    machine: MachineDelete,
}

impl MachineGather {
    fn gathered(&self, facts: GuardFacts, reserved: Reserved) -> Gathered {
        let guard = Arc::clone(&self.guard);
        Gathered {
            facts: Facts::of_fact(FactId::ControlPlaneLoadBalancer, facts.clone()),
            observe: Box::new(move |verdict| {
                guard.metrics().observe(&facts, verdict);
                // A denied DELETE will not happen: it no longer counts against the others.
                guard.settle(reserved, !verdict.denials.is_empty());
            }),
        }
    }
}

impl Gather for MachineGather {
    fn gather(
        self: Arc<Self>,
        deadline: Instant,
    ) -> Pin<Box<dyn Future<Output = Gathered> + Send>> {
        Box::pin(async move {
            let (facts, reserved) = self.guard.gather_reserving(&self.machine, deadline).await;
            self.gathered(facts, reserved)
        })
    }

    fn failed(&self) -> Gathered {
        self.gathered(
            self.guard.unavailable(&self.machine, &GuardError::Internal),
            Reserved::default(),
        )
    }
}
