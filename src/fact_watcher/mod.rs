//! `serve`'s one watcher for every watched fact ([`crate::facts::WatchedFact`]): lists and
//! watches what the fact describes ([`crate::facts::Target`]: one object by name, or every
//! object of a resource) and keeps the reduced fact current in a [`FactCell`].
//!
//! * One object: list and watch with the field selector `metadata.name=<name>` (in the
//!   object's namespace, or cluster-wide for a cluster-scoped object), so the ServiceAccount
//!   needs `get`, `list` and `watch` on that one object only (RBAC `resourceNames`).
//! * Every object of a resource: list (in pages of [`LIST_PAGE_SIZE`]) and watch
//!   cluster-wide; RBAC grants `list` and `watch` on the resource.
//! * Every version is folded into its target's state at once ([`WatchedFact::apply`]); the
//!   object is never kept or logged, so the watcher holds at most one list page of objects.
//!   A relist builds a fresh state and replaces the old one when complete.
//! * The fact is stored once every target has been listed completely, and then whenever a
//!   state changes. A complete list without the object, or its deletion, makes a one-object
//!   fact absent (the families then say they cannot see it; they never guess).
//! * A 401/403 makes the fact [`WatchedFact::refused`] and is logged once (at error or warn,
//!   as the fact says) and retried with kube-runtime's default backoff. A 404 ends the watch
//!   when the fact says the API may not be served ([`WatchedFact::not_served`]: nothing is
//!   retried on a cluster without the API). Other errors (API server away) keep the last
//!   fact and are retried.
//! * `on_first` runs after the first definite answer (every target listed, a refusal or a
//!   404), so a missing permission never holds readiness: the families then only warn.
//!
//! Metrics, per fact: `stackgate_<stem>_syncs_total{outcome}` (`list`, `event`, `deleted`,
//! `forbidden`, `absent`, `error`) and `stackgate_<stem>_known` (1 while the fact is known).

use std::marker::PhantomData;
use std::pin::pin;
use std::sync::atomic::AtomicI64;

use std::sync::Arc;

use arc_swap::ArcSwap;
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::facts::{Target, WatchedFact};

/// Objects per page of a cluster-wide list: the watcher holds at most one page of objects at
/// a time (kube-runtime's default is 500; a Deployment can be tens of KiB).
pub const LIST_PAGE_SIZE: u32 = 100;

/// The current value of a watched fact, shared by the watcher (writer) and its fact source
/// (readers, on the request path: one atomic load). Cheap to clone.
#[derive(Debug)]
pub struct FactCell<T>(Arc<ArcSwap<T>>);

impl<T> Clone for FactCell<T> {
    fn clone(&self) -> Self {
        FactCell(Arc::clone(&self.0))
    }
}

impl<T> FactCell<T> {
    /// A cell holding `initial` (what the fact is before the watcher's first answer).
    pub fn holding(initial: T) -> Self {
        FactCell(Arc::new(ArcSwap::from_pointee(initial)))
    }

    /// The current fact.
    pub fn get(&self) -> Arc<T> {
        self.0.load_full()
    }

    /// Replaces the fact.
    pub fn set(&self, fact: T) {
        self.0.store(Arc::new(fact));
    }
}

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
    let targets = fact.targets();
    let streams: Vec<BoxStream<'static, (usize, WatchItem)>> = targets
        .iter()
        .enumerate()
        .map(|(index, target)| {
            stream_of(client.clone(), target)
                .map(move |item| (index, item))
                .boxed()
        })
        .collect();
    let mut stream = pin!(futures::stream::select_all(streams));
    let mut on_first = Some(on_first);
    let mut states: Vec<W::State> = targets.iter().map(|_| W::State::default()).collect();
    // A relist in progress builds a fresh state; the old one serves until it is complete.
    let mut relisting: Vec<Option<W::State>> = targets.iter().map(|_| None).collect();
    let mut listed = vec![false; targets.len()];
    let mut refused_logged = false;
    let label = W::LOG_LABEL;
    let object = fact.describe();
    while let Some((index, item)) = stream.next().await {
        let resource = targets[index].resource();
        match item {
            Ok(Event::Init) => relisting[index] = Some(W::State::default()),
            Ok(Event::InitApply(o)) => {
                let state = relisting[index].get_or_insert_with(W::State::default);
                fact.apply(resource, state, &o);
            }
            Ok(Event::InitDone) => {
                metrics.sync("list");
                refused_logged = false;
                states[index] = relisting[index].take().unwrap_or_default();
                listed[index] = true;
                if listed.iter().all(|l| *l) {
                    let current = fact.fact(&states);
                    tracing::info!(%object, known = W::is_known(&current), "{label}: listed");
                    metrics.set(&store, current);
                    if let Some(first) = on_first.take() {
                        first();
                    }
                }
            }
            Ok(Event::Apply(o)) => {
                metrics.sync("event");
                if fact.apply(resource, &mut states[index], &o) && listed.iter().all(|l| *l) {
                    tracing::info!(%object, "{label}: changed");
                    metrics.set(&store, fact.fact(&states));
                }
            }
            Ok(Event::Delete(o)) => {
                metrics.sync("deleted");
                if fact.delete(resource, &mut states[index], &o) && listed.iter().all(|l| *l) {
                    tracing::warn!(%object, "{label}: deleted");
                    metrics.set(&store, fact.fact(&states));
                }
            }
            Err(error) => match (status_code(&error), fact.not_served()) {
                (Some(404), Some(unserved)) => {
                    metrics.sync("absent");
                    tracing::info!(
                        %object,
                        "{label}: the API server does not serve {}.{}; {}",
                        resource.plural,
                        resource.group,
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
                    // Until this target is listed again, the fact is the refusal: events of
                    // the other targets do not replace it with a partial one.
                    listed[index] = false;
                    if !refused_logged {
                        let without = W::WITHOUT;
                        let plural = resource.plural;
                        if W::REFUSAL_IS_ERROR {
                            tracing::error!(
                                code,
                                %object,
                                "{label}: the API server refuses to list or watch {plural}; \
                                 grant get, list and watch on it to stackgate's \
                                 ServiceAccount; {without}; retrying"
                            );
                        } else {
                            tracing::warn!(
                                code,
                                %object,
                                "{label}: the API server refuses to list or watch {plural}; \
                                 grant get, list and watch on it to stackgate's \
                                 ServiceAccount; {without}; retrying"
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

/// One item of a target's watch stream.
type WatchItem = Result<Event<DynamicObject>, watcher::Error>;

/// The watch stream of one target, with kube-runtime's default backoff.
fn stream_of(
    client: kube::Client,
    target: &Target,
) -> impl futures::Stream<Item = WatchItem> + Send + 'static {
    let resource = target.resource();
    let api_resource = ApiResource::from_gvk_with_plural(&resource.gvk(), resource.plural);
    let api: Api<DynamicObject> = match target.namespace() {
        Some(namespace) => Api::namespaced_with(client, namespace, &api_resource),
        None => Api::all_with(client, &api_resource),
    };
    let config = match target.field_selector() {
        Some(selector) => watcher::Config::default().fields(&selector),
        None => watcher::Config::default().page_size(LIST_PAGE_SIZE),
    };
    watcher::watcher(api, config).default_backoff()
}

/// The HTTP status of an API error that started the list or the watch.
fn status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}
