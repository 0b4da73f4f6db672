//! `serve`'s one watcher for every watched fact ([`crate::facts::WatchedFact`]): lists and
//! watches the one object the fact describes and keeps the reduced fact current.
//!
//! * List and watch with the field selector `metadata.name=<name>` (in the object's namespace,
//!   or cluster-wide for a cluster-scoped object), so the ServiceAccount needs `get`, `list`
//!   and `watch` on that one object only (RBAC `resourceNames`).
//! * Every version is reduced at once ([`WatchedFact::reduce`]); the object is never kept or
//!   logged.
//! * A complete list without the object, or its deletion, makes the fact
//!   [`WatchedFact::absent`] (the families then say they cannot see it; they never guess).
//! * A 401/403 makes the fact [`WatchedFact::refused`] and is logged once (at error or warn,
//!   as the fact says) and retried with kube-runtime's default backoff. A 404 ends the watch
//!   when the fact says the API may not be served ([`WatchedFact::not_served`]: nothing is
//!   retried on a cluster without the API). Other errors (API server away) keep the last
//!   fact and are retried.
//! * `on_first` runs after the first definite answer (a complete list, a refusal or a 404),
//!   so a missing permission never holds readiness: the families then only warn.
//!
//! Metrics, per fact: `stackgate_<stem>_syncs_total{outcome}` (`list`, `event`, `deleted`,
//! `forbidden`, `absent`, `error`) and `stackgate_<stem>_known` (1 while the fact is known).

use std::marker::PhantomData;
use std::pin::pin;
use std::sync::atomic::AtomicI64;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::facts::WatchedFact;

/// Labels of `stackgate_<stem>_syncs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `list`, `event`, `deleted`, `forbidden`, `absent` or `error`.
    pub outcome: &'static str,
}

/// One fact watcher's metrics. Cheap to clone.
pub struct FactMetrics<W> {
    syncs: Family<SyncLabels, Counter>,
    known: Gauge<i64, AtomicI64>,
    fact: PhantomData<fn() -> W>,
}

impl<W> Clone for FactMetrics<W> {
    fn clone(&self) -> Self {
        FactMetrics {
            syncs: self.syncs.clone(),
            known: self.known.clone(),
            fact: PhantomData,
        }
    }
}

impl<W> Default for FactMetrics<W> {
    fn default() -> Self {
        FactMetrics {
            syncs: Family::default(),
            known: Gauge::default(),
            fact: PhantomData,
        }
    }
}

impl<W> std::fmt::Debug for FactMetrics<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FactMetrics")
            .field("known", &self.known.get())
            .finish_non_exhaustive()
    }
}

impl<W: WatchedFact> FactMetrics<W> {
    /// Registers the metrics (names get the registry's `stackgate` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            format!("{}_syncs", W::METRICS),
            W::SYNCS_HELP,
            self.syncs.clone(),
        );
        registry.register(
            format!("{}_known", W::METRICS),
            W::KNOWN_HELP,
            self.known.clone(),
        );
    }

    fn sync(&self, outcome: &'static str) {
        self.syncs.get_or_create(&SyncLabels { outcome }).inc();
    }

    fn set(&self, store: &impl Fn(W::Fact), fact: W::Fact) {
        self.known.set(i64::from(W::is_known(&fact)));
        store(fact);
    }
}

/// Watches what `fact` describes until the task is aborted (or the API turns out not to be
/// served, when the fact allows it), handing every new fact to `store`. `on_first` runs
/// once, after the first definite answer.
pub async fn run<W, S, F>(
    client: kube::Client,
    fact: W,
    store: S,
    metrics: FactMetrics<W>,
    on_first: F,
) where
    W: WatchedFact,
    S: Fn(W::Fact) + Send,
    F: FnOnce() + Send + 'static,
{
    let watch = fact.watch();
    let resource = ApiResource::from_gvk_with_plural(&watch.resource.gvk(), watch.resource.plural);
    let api: Api<DynamicObject> = match &watch.namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, &resource),
        None => Api::all_with(client, &resource),
    };
    let config = watcher::Config::default().fields(&watch.field_selector());
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = pin!(stream);
    let mut on_first = Some(on_first);
    let mut listed: Option<W::Fact> = None;
    let mut refused_logged = false;
    let label = W::LOG_LABEL;
    let object = fact.describe();
    while let Some(item) = stream.next().await {
        match item {
            Ok(Event::Init) => listed = None,
            Ok(Event::InitApply(o)) => listed = Some(fact.reduce(&o)),
            Ok(Event::InitDone) => {
                metrics.sync("list");
                refused_logged = false;
                let current = listed.take().unwrap_or_else(|| fact.absent());
                tracing::info!(%object, known = W::is_known(&current), "{label}: listed");
                metrics.set(&store, current);
                if let Some(first) = on_first.take() {
                    first();
                }
            }
            Ok(Event::Apply(o)) => {
                metrics.sync("event");
                tracing::info!(%object, "{label}: changed");
                metrics.set(&store, fact.reduce(&o));
            }
            Ok(Event::Delete(_)) => {
                metrics.sync("deleted");
                tracing::warn!(%object, "{label}: deleted");
                metrics.set(&store, fact.absent());
            }
            Err(error) => match (status_code(&error), fact.not_served()) {
                (Some(404), Some(unserved)) => {
                    metrics.sync("absent");
                    tracing::info!(
                        %object,
                        "{label}: the API server does not serve {}.{}; {}",
                        watch.resource.plural,
                        watch.resource.group,
                        W::WITHOUT
                    );
                    metrics.set(&store, unserved);
                    if let Some(first) = on_first.take() {
                        first();
                    }
                    return;
                }
                (Some(code @ (401 | 403)), _) => {
                    metrics.sync("forbidden");
                    if !refused_logged {
                        let without = W::WITHOUT;
                        if W::REFUSAL_IS_ERROR {
                            tracing::error!(
                                code,
                                %object,
                                "{label}: the API server refuses to list or watch it; grant \
                                 get, list and watch on it to stackgate's ServiceAccount; \
                                 {without}; retrying"
                            );
                        } else {
                            tracing::warn!(
                                code,
                                %object,
                                "{label}: the API server refuses to list or watch it; grant \
                                 get, list and watch on it to stackgate's ServiceAccount; \
                                 {without}; retrying"
                            );
                        }
                        refused_logged = true;
                    }
                    metrics.set(&store, fact.refused(code));
                    if let Some(first) = on_first.take() {
                        first();
                    }
                }
                _ => {
                    metrics.sync("error");
                    tracing::warn!(%error, %object, "{label}: list/watch failed; keeping the last state, retrying");
                }
            },
        }
    }
}

/// The HTTP status of an API error that started the list or the watch.
fn status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}
