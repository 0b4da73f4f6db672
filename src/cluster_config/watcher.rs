//! Watches the one configured cloud-config object and keeps its fact current: the generic
//! fact watcher ([`crate::fact_watcher`]) over [`ConfigObject`] (a
//! [`crate::facts::WatchedFact`]).
//!
//! * Every version is reduced to its [`crate::facts::cloud_config::LbSettings`] at once; the
//!   text is never kept or logged.
//! * A complete list without the object, or its deletion, makes the fact "does not exist".
//! * A 401/403 makes the fact "cannot be read (forbidden)" and is logged once at error; other
//!   errors (API server away, 404 included) keep the last fact and are retried.
//!
//! Metrics: `stackgate_cloud_config_syncs_total{outcome}` (`list`, `event`, `deleted`,
//! `forbidden`, `error`) and `stackgate_cloud_config_known` (1 while the config is read).

use super::{ConfigFactCell, ConfigObject};
pub use crate::fact_watcher::SyncLabels;
use crate::fact_watcher::{self, FactMetrics};

/// The cloud-config watcher's metrics. Cheap to clone.
pub type CloudConfigMetrics = FactMetrics<ConfigObject>;

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
    fact_watcher::run(
        client,
        object,
        move |fact| cell.set(fact),
        metrics,
        on_first,
    )
    .await;
}
