//! Fact sources: IO adapters that gather what a rule family needs to know from outside the
//! write (the control-plane guard asks Kubernetes, Keystone and Octavia) before the pure
//! evaluation. The server runs every source that wants a review, under the review's deadline,
//! and merges what they gather ([`AllOf`]), without knowing which rule the facts are for.

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

/// Several gatherings for one review (every source that wants it), run concurrently under
/// the same deadline; their facts are merged in source order and each records its own
/// metrics.
pub struct AllOf(pub Vec<Arc<dyn Gather>>);

impl AllOf {
    fn merge(parts: Vec<Gathered>) -> Gathered {
        let mut facts = Facts::default();
        let mut observers = Vec::with_capacity(parts.len());
        for part in parts {
            facts.merge(part.facts);
            observers.push(part.observe);
        }
        Gathered {
            facts,
            observe: Box::new(move |verdict| {
                for observe in observers {
                    observe(verdict);
                }
            }),
        }
    }
}

impl Gather for AllOf {
    fn gather(
        self: Arc<Self>,
        deadline: Instant,
    ) -> Pin<Box<dyn Future<Output = Gathered> + Send>> {
        let parts: Vec<_> = self
            .0
            .iter()
            .map(|part| Arc::clone(part).gather(deadline))
            .collect();
        Box::pin(async move { Self::merge(futures::future::join_all(parts).await) })
    }

    fn failed(&self) -> Gathered {
        Self::merge(self.0.iter().map(|part| part.failed()).collect())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::FactId;
    use crate::rules::Platform;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counted(Facts, Arc<AtomicUsize>);

    impl Gather for Counted {
        fn gather(
            self: Arc<Self>,
            _deadline: Instant,
        ) -> Pin<Box<dyn Future<Output = Gathered> + Send>> {
            Box::pin(async move { self.failed() })
        }

        fn failed(&self) -> Gathered {
            let seen = Arc::clone(&self.1);
            Gathered {
                facts: self.0.clone(),
                observe: Box::new(move |_| {
                    seen.fetch_add(1, Ordering::SeqCst);
                }),
            }
        }
    }

    /// Every source that wants a review contributes its facts, and each observes the verdict.
    #[tokio::test]
    async fn all_sources_contribute_and_observe() {
        let observed = Arc::new(AtomicUsize::new(0));
        let all = Arc::new(AllOf(vec![
            Arc::new(Counted(
                Facts::of_fact(FactId::CloudConfig, 1_u8),
                Arc::clone(&observed),
            )),
            Arc::new(Counted(
                Facts::of_platform(Platform::OpenStack),
                Arc::clone(&observed),
            )),
        ]));
        for gathered in [all.failed(), Arc::clone(&all).gather(Instant::now()).await] {
            assert_eq!(gathered.facts.platform(), Some(&Platform::OpenStack));
            let reader = crate::rules::FAMILIES
                .iter()
                .find(|f| f.facts.contains(&FactId::CloudConfig))
                .expect("a family reads the cloud config");
            assert_eq!(gathered.facts.get::<u8>(reader.id), Some(&1));
            (gathered.observe)(&Verdict::default());
        }
        assert_eq!(observed.load(Ordering::SeqCst), 4);
    }
}
