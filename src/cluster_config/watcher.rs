//! Watches the one configured cloud-config object and keeps its fact current.
//!
//! * List and watch in the object's namespace with the field selector
//!   `metadata.name=<name>`, so the ServiceAccount needs `get`, `list` and `watch` on that one
//!   object only (RBAC `resourceNames` allows list/watch with a matching name selector).
//! * Every version is reduced to its [`crate::facts::cloud_config::LbSettings`] at once;
//!   the text is never kept or logged.
//! * A complete list without the object, or its deletion, makes the fact "does not exist"
//!   (the family then warns that it cannot see the config; it never guesses).
//! * A 401/403 makes the fact "cannot be read (forbidden)" and is logged once at error;
//!   other errors (API server away) keep the last fact and are retried with kube-runtime's
//!   default backoff.
//! * `on_first` runs after the first definite answer (a complete list, or a refusal), so a
//!   missing permission never holds readiness: the rule then only warns.
//!
//! Metrics: `stackgate_cloud_config_syncs_total{outcome}` (`list`, `event`, `deleted`,
//! `forbidden`, `error`) and `stackgate_cloud_config_known` (1 while the config is read).

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

use super::{ConfigFactCell, ConfigObject};
use crate::rules::ovn_source_ranges::CloudConfigFact;

/// Labels of `stackgate_cloud_config_syncs_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SyncLabels {
    /// `list`, `event`, `deleted`, `forbidden` or `error`.
    pub outcome: &'static str,
}

/// The cloud-config watcher's metrics. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct CloudConfigMetrics {
    syncs: Family<SyncLabels, Counter>,
    known: Gauge<i64, AtomicI64>,
}

impl CloudConfigMetrics {
    /// Registers the metrics (names get the registry's `stackgate` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "cloud_config_syncs",
            "Cloud-config object watcher outcomes: lists, events, deletion, refusals, errors",
            self.syncs.clone(),
        );
        registry.register(
            "cloud_config_known",
            "1 while the configured cloud config is read and valid for the rules, else 0",
            self.known.clone(),
        );
    }

    fn sync(&self, outcome: &'static str) {
        self.syncs.get_or_create(&SyncLabels { outcome }).inc();
    }

    fn set(&self, cell: &ConfigFactCell, fact: CloudConfigFact) {
        let known = matches!(&fact, CloudConfigFact::Known(s) if s.readable);
        self.known.set(i64::from(known));
        cell.set(fact);
    }
}

/// The API resource and field selector of what the fact describes ([`ConfigObject::watch`]).
fn api_of(object: &ConfigObject) -> (ApiResource, String) {
    let watch = object.watch();
    let resource = ApiResource::from_gvk_with_plural(&watch.resource.gvk(), watch.resource.plural);
    (resource, watch.field_selector())
}

/// Watches `object` until the task is aborted, keeping `cell` current. `on_first` runs once,
/// after the first complete list or refusal.
pub async fn run<F>(
    client: kube::Client,
    object: ConfigObject,
    cell: ConfigFactCell,
    metrics: CloudConfigMetrics,
    on_first: F,
) where
    F: FnOnce() + Send + 'static,
{
    let (resource, fields) = api_of(&object);
    let api: Api<DynamicObject> = Api::namespaced_with(client, &object.namespace, &resource);
    let config = watcher::Config::default().fields(&fields);
    let stream = watcher::watcher(api, config).default_backoff();
    let mut stream = pin!(stream);
    let mut on_first = Some(on_first);
    let mut listed: Option<CloudConfigFact> = None;
    let mut refused_logged = false;
    let absent = || object.absent();
    while let Some(item) = stream.next().await {
        match item {
            Ok(Event::Init) => listed = None,
            Ok(Event::InitApply(o)) => listed = Some(object.fact_of(&o)),
            Ok(Event::InitDone) => {
                metrics.sync("list");
                refused_logged = false;
                let fact = listed.take().unwrap_or_else(absent);
                tracing::info!(
                    object = %object.describe(),
                    known = matches!(fact, CloudConfigFact::Known(_)),
                    "cloud config: listed"
                );
                metrics.set(&cell, fact);
                if let Some(first) = on_first.take() {
                    first();
                }
            }
            Ok(Event::Apply(o)) => {
                metrics.sync("event");
                tracing::info!(object = %object.describe(), "cloud config: changed");
                metrics.set(&cell, object.fact_of(&o));
            }
            Ok(Event::Delete(_)) => {
                metrics.sync("deleted");
                tracing::warn!(object = %object.describe(), "cloud config: deleted");
                metrics.set(&cell, absent());
            }
            Err(error) => {
                if let Some(code) = refused(&error) {
                    metrics.sync("forbidden");
                    if !refused_logged {
                        tracing::error!(
                            code,
                            object = %object.describe(),
                            "cloud config: the API server refuses to list or watch it; grant \
                             get, list and watch on it to stackgate's ServiceAccount; rules that \
                             need it warn that they cannot see it; retrying"
                        );
                        refused_logged = true;
                    }
                    metrics.set(&cell, object.refused(code));
                    if let Some(first) = on_first.take() {
                        first();
                    }
                } else {
                    metrics.sync("error");
                    tracing::warn!(%error, object = %object.describe(), "cloud config: list/watch failed; keeping the last state, retrying");
                }
            }
        }
    }
}

/// The HTTP status when the API server refused the request for lack of permission.
fn refused(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if matches!(status.code, 401 | 403) =>
        {
            Some(status.code)
        }
        _ => None,
    }
}
