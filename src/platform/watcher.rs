//! Watches the OpenShift `Infrastructure` object `cluster` and keeps the platform fact current.
//!
//! * List and watch `infrastructures.config.openshift.io` (cluster-scoped) with the field
//!   selector `metadata.name=cluster`, so the ServiceAccount needs `get`, `list` and `watch`
//!   on that one object only (RBAC `resourceNames: [cluster]`).
//! * Every version is reduced to its platform type at once; nothing else is kept.
//! * A 404 (the API is not served: not OpenShift) makes the fact unknown, is logged once at
//!   info and ends the watch: nothing is retried on a cluster that has no such API, so
//!   `--openshift-platform auto` costs one request there.
//! * A 401/403 makes the fact unknown, is logged once at warn and is retried with kube-runtime's
//!   default backoff; other errors (API server away) keep the last fact and are retried.
//! * A complete list without the object, or its deletion, makes the fact unknown.
//! * `on_first` runs after the first definite answer (a complete list, a refusal or a 404),
//!   so the fact never holds readiness for long: unknown is today's content-based decision.
//!
//! Metrics: `stackgate_openshift_platform_syncs_total{outcome}` (`list`, `event`, `deleted`,
//! `forbidden`, `absent`, `error`) and `stackgate_openshift_platform_known` (1 while the
//! platform is known).

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

use super::{PlatformCell, PlatformFact};

/// Labels of `stackgate_openshift_platform_syncs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `list`, `event`, `deleted`, `forbidden`, `absent` or `error`.
    pub outcome: &'static str,
}

/// The platform watcher's metrics. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct PlatformMetrics {
    syncs: Family<SyncLabels, Counter>,
    known: Gauge<i64, AtomicI64>,
}

impl PlatformMetrics {
    /// Registers the metrics (names get the registry's `stackgate` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "openshift_platform_syncs",
            "OpenShift Infrastructure watcher outcomes: lists, events, deletion, refusals, \
             absent API, errors",
            self.syncs.clone(),
        );
        registry.register(
            "openshift_platform_known",
            "1 while the cluster's platform is known from the OpenShift Infrastructure object",
            self.known.clone(),
        );
    }

    fn sync(&self, outcome: &'static str) {
        self.syncs.get_or_create(&SyncLabels { outcome }).inc();
    }

    fn set(&self, cell: &PlatformCell, fact: PlatformFact) {
        self.known.set(i64::from(fact.platform().is_some()));
        cell.set(fact);
    }
}

/// The API resource `infrastructures.config.openshift.io/v1` ([`crate::facts::platform::watch`]).
pub fn api_resource() -> ApiResource {
    let resource = crate::facts::platform::watch().resource;
    ApiResource::from_gvk_with_plural(&resource.gvk(), resource.plural)
}

/// Watches `Infrastructure/cluster` until the task is aborted or the API turns out not to be
/// served (404), keeping `cell` current. `on_first` runs once, after the first definite answer.
pub async fn run<F>(client: kube::Client, cell: PlatformCell, metrics: PlatformMetrics, on_first: F)
where
    F: FnOnce() + Send + 'static,
{
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource());
    let config =
        watcher::Config::default().fields(&crate::facts::platform::watch().field_selector());
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = pin!(stream);
    let mut on_first = Some(on_first);
    let mut listed: Option<PlatformFact> = None;
    let mut refused_logged = false;
    let absent = || PlatformFact::Unknown("Infrastructure cluster does not exist".to_owned());
    while let Some(item) = stream.next().await {
        match item {
            Ok(Event::Init) => listed = None,
            Ok(Event::InitApply(o)) => listed = Some(PlatformFact::of_infrastructure(&o)),
            Ok(Event::InitDone) => {
                metrics.sync("list");
                refused_logged = false;
                let fact = listed.take().unwrap_or_else(absent);
                tracing::info!(platform = ?fact.platform(), "openshift platform: listed");
                metrics.set(&cell, fact);
                if let Some(first) = on_first.take() {
                    first();
                }
            }
            Ok(Event::Apply(o)) => {
                metrics.sync("event");
                let fact = PlatformFact::of_infrastructure(&o);
                tracing::info!(platform = ?fact.platform(), "openshift platform: changed");
                metrics.set(&cell, fact);
            }
            Ok(Event::Delete(_)) => {
                metrics.sync("deleted");
                tracing::warn!("openshift platform: Infrastructure cluster deleted");
                metrics.set(&cell, absent());
            }
            Err(error) => match status_code(&error) {
                Some(404) => {
                    metrics.sync("absent");
                    tracing::info!(
                        "openshift platform: the API server does not serve \
                         infrastructures.config.openshift.io (not OpenShift); cloud configs \
                         are judged by their content alone"
                    );
                    metrics.set(
                        &cell,
                        PlatformFact::Unknown(
                            "infrastructures.config.openshift.io is not served".to_owned(),
                        ),
                    );
                    if let Some(first) = on_first.take() {
                        first();
                    }
                    return;
                }
                Some(code @ (401 | 403)) => {
                    metrics.sync("forbidden");
                    if !refused_logged {
                        tracing::warn!(
                            code,
                            "openshift platform: the API server refuses to list or watch \
                             Infrastructure cluster; grant get, list and watch on it to \
                             stackgate's ServiceAccount; cloud configs are judged by their \
                             content alone; retrying"
                        );
                        refused_logged = true;
                    }
                    metrics.set(
                        &cell,
                        PlatformFact::Unknown(format!(
                            "Infrastructure cluster cannot be read by stackgate (HTTP {code}: RBAC)"
                        )),
                    );
                    if let Some(first) = on_first.take() {
                        first();
                    }
                }
                _ => {
                    metrics.sync("error");
                    tracing::warn!(%error, "openshift platform: list/watch failed; keeping the last state, retrying");
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
