//! Shared state: the engine snapshot, metrics, the review function, the optional
//! fact sources, and readiness.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

use crate::admission::{self, FactSource, Gather, Gathered, Reply, Webhook};
use crate::budget::Cancel;
use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::releases::metrics::ReleaseMetrics;
use crate::releases::watcher::WatchConfig;

/// A review function that replaces the engine, e.g. the do-nothing baseline in
/// `examples/noop_webhook.rs` or a test double. It must be fast, must not block and must
/// not panic, like [`admission::handle`].
pub type ReviewFn = Arc<dyn Fn(Webhook, &[u8]) -> Reply + Send + Sync>;

/// What the server shares between connections. Built once by `main` and handed to
/// [`crate::server::run`].
pub struct AppState {
    /// The policy engine in use. Swap it to apply new policies: in-flight reviews finish
    /// on the snapshot they loaded, new ones see the new engine.
    pub engine: ArcSwap<Engine>,
    /// Metrics, exported on the admin listener's `/metrics`.
    pub metrics: Metrics,
    handler: Option<ReviewFn>,
    fact_sources: Vec<Arc<dyn FactSource>>,
    policies_loaded: AtomicBool,
    certs_loaded: AtomicBool,
    draining: AtomicBool,
    gates: Mutex<Vec<Arc<Gate>>>,
}

impl fmt::Debug for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState")
            .field("custom_handler", &self.handler.is_some())
            .field("fact_sources", &self.fact_sources)
            .field("readiness", &self.readiness())
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// State that reviews with `engine`. Policies count as loaded (the engine was built
    /// from them); certificates are marked loaded by the server once they are.
    pub fn new(engine: Engine, metrics: Metrics) -> Self {
        Self {
            engine: ArcSwap::from_pointee(engine),
            metrics,
            handler: None,
            fact_sources: Vec::new(),
            policies_loaded: AtomicBool::new(true),
            certs_loaded: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            gates: Mutex::new(Vec::new()),
        }
    }

    /// Replaces the engine with `handler` for every review (the engine is then unused).
    #[must_use]
    pub fn with_handler(mut self, handler: ReviewFn) -> Self {
        self.handler = Some(handler);
        self
    }

    /// Adds a fact source (e.g. the control-plane load-balancer guard): reviews it wants
    /// gather its facts (within the request deadline) before the engine evaluates them.
    /// Other reviews are unaffected. Ignored with a custom handler.
    #[must_use]
    pub fn with_fact_source(mut self, source: Arc<dyn FactSource>) -> Self {
        self.fact_sources.push(source);
        self
    }

    /// Starts the `OpenStackVersion` watcher ([`crate::releases::watcher::run`]) on `client`:
    /// a `release-catalog` readiness gate holds `/readyz` until the first complete list, and
    /// every new snapshot swaps the engine (in-flight reviews finish on the one they loaded).
    /// When the API server goes away the last snapshot keeps serving. The task runs until it
    /// is aborted.
    pub fn watch_releases(
        self: &Arc<Self>,
        client: kube::Client,
        config: WatchConfig,
        metrics: ReleaseMetrics,
    ) -> tokio::task::JoinHandle<()> {
        let gate = self.add_readiness_gate("release-catalog");
        let sink = Arc::clone(self);
        tokio::spawn(crate::releases::watcher::run(
            client,
            config,
            metrics,
            move |snapshot| {
                let next = sink.engine.load().with_release_snapshot(snapshot);
                sink.engine.store(Arc::new(next));
            },
            move || gate.set(true),
        ))
    }

    /// What to gather before evaluating `body`: every fact source that wants it contributes
    /// (their facts are merged), when the engine answers (no custom handler). With no source
    /// this is one length check.
    pub(crate) fn gather_for(&self, webhook: Webhook, body: &[u8]) -> Option<Arc<dyn Gather>> {
        if self.fact_sources.is_empty() || self.handler.is_some() {
            return None;
        }
        let engine = self.engine.load();
        let mut wanted: Vec<Arc<dyn Gather>> = self
            .fact_sources
            .iter()
            .filter_map(|source| source.wants(webhook, body, &engine))
            .collect();
        match wanted.len() {
            0 => None,
            1 => wanted.pop(),
            _ => Some(Arc::new(admission::AllOf(wanted))),
        }
    }

    /// [`Self::review`], or with the facts a source gathered.
    pub(crate) fn answer(
        &self,
        webhook: Webhook,
        body: &[u8],
        gathered: Option<Gathered>,
        cancel: &Cancel,
    ) -> Reply {
        match gathered {
            None => self.review_within(webhook, body, cancel),
            Some(Gathered { facts, observe }) => {
                let (reply, verdict) = admission::handle_with(
                    &self.engine.load(),
                    webhook,
                    body,
                    &self.metrics,
                    &facts,
                    cancel,
                );
                if let Some(verdict) = verdict {
                    observe(&verdict);
                }
                reply
            }
        }
    }

    /// Answers one review body: the custom handler if one is set, otherwise
    /// [`admission::handle`] on the current engine snapshot. Synchronous and fast.
    pub fn review(&self, webhook: Webhook, body: &[u8]) -> Reply {
        self.review_within(webhook, body, &Cancel::never())
    }

    /// [`Self::review`] that gives up when `cancel` fires (the request deadline passed).
    pub fn review_within(&self, webhook: Webhook, body: &[u8], cancel: &Cancel) -> Reply {
        match &self.handler {
            Some(handler) => handler(webhook, body),
            None => {
                admission::handle_with(
                    &self.engine.load(),
                    webhook,
                    body,
                    &self.metrics,
                    &crate::engine::Facts::default(),
                    cancel,
                )
                .0
            }
        }
    }

    /// Marks the policy set as loaded or not (e.g. while a reload from a directory fails
    /// on start). `/readyz` answers 503 while it is false.
    pub fn set_policies_loaded(&self, loaded: bool) {
        self.policies_loaded.store(loaded, Ordering::Release);
    }

    /// Registers a named readiness condition, initially **unready**. `/readyz` answers 503
    /// and names the gate until [`ReadinessGate::set`]`(true)`. Gates live as long as the
    /// state; dropping the handle does not remove the gate.
    pub fn add_readiness_gate(&self, name: impl Into<String>) -> ReadinessGate {
        let gate = Arc::new(Gate {
            name: name.into(),
            ready: AtomicBool::new(false),
        });
        self.gates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::clone(&gate));
        ReadinessGate { gate }
    }

    /// Current readiness: certificates loaded, policies loaded, every gate set, and not
    /// shutting down.
    pub fn readiness(&self) -> Readiness {
        let mut unready = Vec::new();
        if self.draining.load(Ordering::Acquire) {
            unready.push("shutting-down".to_owned());
        }
        if !self.certs_loaded.load(Ordering::Acquire) {
            unready.push("certificates".to_owned());
        }
        if !self.policies_loaded.load(Ordering::Acquire) {
            unready.push("policies".to_owned());
        }
        let gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        unready.extend(
            gates
                .iter()
                .filter(|g| !g.ready.load(Ordering::Acquire))
                .map(|g| g.name.clone()),
        );
        Readiness { unready }
    }

    /// True once shutdown has begun (readiness is then false for good).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    pub(crate) fn set_certs_loaded(&self, loaded: bool) {
        self.certs_loaded.store(loaded, Ordering::Release);
    }

    pub(crate) fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
        self.metrics.set_ready(false);
    }
}

#[derive(Debug)]
struct Gate {
    name: String,
    ready: AtomicBool,
}

/// Handle to one readiness condition registered with [`AppState::add_readiness_gate`].
#[derive(Debug, Clone)]
pub struct ReadinessGate {
    gate: Arc<Gate>,
}

impl ReadinessGate {
    /// Sets the condition.
    pub fn set(&self, ready: bool) {
        self.gate.ready.store(ready, Ordering::Release);
    }

    /// Whether the condition is currently met.
    pub fn is_ready(&self) -> bool {
        self.gate.ready.load(Ordering::Acquire)
    }

    /// The name shown by `/readyz` while unready.
    pub fn name(&self) -> &str {
        &self.gate.name
    }
}

/// Result of [`AppState::readiness`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Names of the unmet conditions (`shutting-down`, `certificates`, `policies`, gate
    /// names); empty when ready.
    pub unready: Vec<String>,
}

impl Readiness {
    /// True when every condition is met.
    pub fn is_ready(&self) -> bool {
        self.unready.is_empty()
    }
}
