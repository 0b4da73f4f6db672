//! Watches the OpenShift `Infrastructure` object `cluster` and keeps the platform fact
//! current: the generic fact watcher ([`crate::fact_watcher`]) over
//! [`crate::facts::platform::Infrastructure`] (a [`crate::facts::WatchedFact`]).
//!
//! * Every version is reduced to its platform type at once; nothing else is kept.
//! * A 404 (the API is not served: not OpenShift) makes the fact unknown, is logged once at
//!   info and ends the watch: nothing is retried on a cluster that has no such API, so
//!   `--openshift-platform auto` costs one request there.
//! * A 401/403 makes the fact unknown, is logged once at warn and is retried with
//!   kube-runtime's default backoff; other errors (API server away) keep the last fact and are
//!   retried.
//! * A complete list without the object, or its deletion, makes the fact unknown.
//!
//! Metrics: `stackgate_openshift_platform_syncs_total{outcome}` (`list`, `event`, `deleted`,
//! `forbidden`, `absent`, `error`) and `stackgate_openshift_platform_known` (1 while the
//! platform is known).

use super::PlatformCell;
pub use crate::fact_watcher::SyncLabels;
use crate::fact_watcher::{self, FactMetrics};
use crate::facts::platform::Infrastructure;

/// The platform watcher's metrics. Cheap to clone.
pub type PlatformMetrics = FactMetrics<Infrastructure>;

/// Watches `Infrastructure/cluster` until the task is aborted or the API turns out not to be
/// served (404), keeping `cell` current. `on_first` runs once, after the first definite answer.
pub async fn run<F>(client: kube::Client, cell: PlatformCell, metrics: PlatformMetrics, on_first: F)
where
    F: FnOnce() + Send + 'static,
{
    fact_watcher::run(
        client,
        Infrastructure,
        move |fact| cell.set(fact),
        metrics,
        on_first,
    )
    .await;
}
