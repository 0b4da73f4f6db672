//! Fact sources: IO adapters that gather what a rule family needs to know from outside the
//! write (the control-plane guard asks Kubernetes, Keystone and Octavia) before the pure
//! evaluation. The server runs whichever source wants a review, under the review's deadline,
//! without knowing which rule the facts are for.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Instant;

use super::Webhook;
use crate::engine::{Engine, Facts, Verdict};

/// An adapter that gathers facts for some reviews.
pub trait FactSource: Send + Sync + std::fmt::Debug {
    /// What to gather for `body` on `webhook`, or None when this source has nothing to add.
    /// Called for every review, before any decoding: keep it cheap.
    fn wants(&self, webhook: Webhook, body: &[u8], engine: &Engine) -> Option<Arc<dyn Gather>>;
}

/// One pending gathering.
pub trait Gather: Send + Sync {
    /// Gathers the facts, finishing by `deadline`. Never fails: what could not be learnt is
    /// itself a fact (the family decides what an unknown means).
    fn gather(self: Arc<Self>, deadline: Instant)
    -> Pin<Box<dyn Future<Output = Gathered> + Send>>;

    /// The facts to use when the gathering task itself failed (a bug in the IO code).
    fn failed(&self) -> Gathered;
}

/// Facts already known when the review arrives (a watcher's current snapshot): gathering
/// does no IO and cannot fail, and there is nothing of the source's own to record.
pub struct KnownFacts(pub Facts);

impl KnownFacts {
    fn gathered(&self) -> Gathered {
        Gathered {
            facts: self.0.clone(),
            observe: Box::new(|_| {}),
        }
    }
}

impl Gather for KnownFacts {
    fn gather(
        self: Arc<Self>,
        _deadline: Instant,
    ) -> Pin<Box<dyn Future<Output = Gathered> + Send>> {
        Box::pin(async move { self.gathered() })
    }

    fn failed(&self) -> Gathered {
        self.gathered()
    }
}

/// Whether a review body holds `needle`: the byte test a [`FactSource::wants`] uses to pass
/// over reviews it cannot be about without decoding them.
pub fn body_mentions(body: &[u8], needle: &[u8]) -> bool {
    body.windows(needle.len()).any(|w| w == needle)
}

/// What a gathering found, and what to record once the verdict is known.
pub struct Gathered {
    /// The facts for the evaluation.
    pub facts: Facts,
    /// Records the source's own metrics for the verdict reached with these facts.
    pub observe: Box<dyn FnOnce(&Verdict) + Send>,
}

impl std::fmt::Debug for Gathered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gathered")
            .field("facts", &self.facts)
            .finish_non_exhaustive()
    }
}
