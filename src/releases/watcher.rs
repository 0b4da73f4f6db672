//! The live source: a kube-rs watcher on `OpenStackVersion` (core.openstack.org/v1beta1) in
//! every namespace, turned into immutable [`Snapshot`]s.
//!
//! * The first complete list calls `on_first_list` (the readiness gate) and publishes.
//! * Watch events update the snapshot; a new one is published only when what the engine
//!   reads changed.
//! * Errors (API server gone, watch expired with 410, RBAC) are logged and counted, then
//!   retried with exponential backoff; the last published snapshot keeps serving and its
//!   age grows (`stackgate_release_catalog_snapshot_age_seconds`).
//! * A 404 on the list means the CRD is not installed: that counts as a complete, empty
//!   list (so readiness does not wait for a CRD that may never come) and is retried.
//! * A 401 or 403 means the ServiceAccount may not list them: logged at error, counted
//!   (`forbidden`), the readiness gate opens on the snapshot served so far (static table
//!   only at start), and the watcher retries: a missing permission must not become an
//!   outage of every replica.
//! * Every `resync` the watcher is restarted with a fresh list, which confirms the snapshot
//!   in quiet clusters (watch events alone cannot tell a quiet cluster from a broken watch).
//!
//! RBAC: `list` and `watch` on `openstackversions.core.openstack.org`, cluster-wide.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher::{self, Event};

use super::metrics::ReleaseMetrics;
use super::{Snapshot, VersionState};

/// API group of `OpenStackVersion`.
pub const GROUP: &str = "core.openstack.org";
/// API version of `OpenStackVersion`.
pub const VERSION: &str = "v1beta1";
/// Kind.
pub const KIND: &str = "OpenStackVersion";
/// Plural resource name.
pub const PLURAL: &str = "openstackversions";

/// Watcher timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchConfig {
    /// How often the watcher is restarted with a full list (default 5 minutes).
    pub resync: Duration,
    /// First delay after an error (default 800 ms, kube-runtime's default).
    pub backoff_initial: Duration,
    /// Largest delay between retries (default 30 s).
    pub backoff_max: Duration,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            resync: Duration::from_secs(300),
            backoff_initial: Duration::from_millis(800),
            backoff_max: Duration::from_secs(30),
        }
    }
}

/// The dynamic API resource for `OpenStackVersion`.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// Watches `OpenStackVersion`s until the task is dropped or aborted. `sink` receives every
/// new snapshot (store it, e.g. by swapping the engine); `on_first_list` runs once, after
/// the first complete list (or when the CRD turns out to be absent).
pub async fn run<S, F>(
    client: kube::Client,
    config: WatchConfig,
    metrics: ReleaseMetrics,
    sink: S,
    on_first_list: F,
) where
    S: Fn(Arc<Snapshot>) + Send + Sync + 'static,
    F: FnOnce() + Send + 'static,
{
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource());
    let mut state = State {
        current: Snapshot::empty(),
        on_first_list: Some(Box::new(on_first_list)),
        published: false,
        crd_absent_logged: false,
        refused_logged: false,
    };
    let mut backoff = Backoff::new(config.backoff_initial, config.backoff_max);
    loop {
        let stream = watcher::watcher(api.clone(), watcher::Config::default());
        let mut stream = pin!(stream);
        let resync = tokio::time::sleep(config.resync);
        let mut resync = pin!(resync);
        let mut buffer: Option<Snapshot> = None;
        loop {
            let item = tokio::select! {
                item = stream.next() => item,
                () = &mut resync => {
                    tracing::debug!("release catalog: periodic relist of OpenStackVersions");
                    break;
                }
            };
            let Some(item) = item else {
                break;
            };
            match item {
                Ok(event) => {
                    backoff.reset();
                    state.apply(event, &mut buffer, &metrics, &sink);
                }
                Err(error) => {
                    state.failed(&error, &metrics, &sink);
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }
}

type FirstList = Box<dyn FnOnce() + Send>;

struct State {
    current: Snapshot,
    on_first_list: Option<FirstList>,
    published: bool,
    crd_absent_logged: bool,
    refused_logged: bool,
}

impl State {
    fn apply<S: Fn(Arc<Snapshot>)>(
        &mut self,
        event: Event<DynamicObject>,
        buffer: &mut Option<Snapshot>,
        metrics: &ReleaseMetrics,
        sink: &S,
    ) {
        match event {
            Event::Init => *buffer = Some(Snapshot::empty()),
            Event::InitApply(obj) => {
                if let Some((ns, name, version)) = decode(&obj, metrics) {
                    buffer
                        .get_or_insert_with(Snapshot::empty)
                        .insert(ns, name, version);
                }
            }
            Event::InitDone => {
                let listed = buffer.take().unwrap_or_default();
                metrics.sync("list");
                self.crd_absent_logged = false;
                if !self.published || listed != self.current {
                    tracing::info!(
                        openstackversions = listed.len(),
                        "release catalog: OpenStackVersions listed"
                    );
                }
                self.replace(listed, metrics, sink);
            }
            Event::Apply(obj) => {
                metrics.sync("event");
                if let Some((ns, name, version)) = decode(&obj, metrics) {
                    let changed =
                        self.current.namespace(&ns).and_then(|m| m.get(&name)) != Some(&version);
                    if changed {
                        tracing::info!(
                            namespace = %ns,
                            name = %name,
                            target = version.target_version.as_deref().unwrap_or(""),
                            deployed = version.deployed_version.as_deref().unwrap_or(""),
                            available = version.available_version.as_deref().unwrap_or(""),
                            "release catalog: OpenStackVersion changed"
                        );
                        let mut next = self.current.clone();
                        next.insert(ns, name, version);
                        self.replace(next, metrics, sink);
                    } else {
                        metrics.confirmed(self.current.len());
                    }
                }
            }
            Event::Delete(obj) => {
                metrics.sync("event");
                let ns = obj.metadata.namespace.as_deref().unwrap_or("");
                let name = obj.metadata.name.as_deref().unwrap_or("");
                let mut next = self.current.clone();
                if next.remove(ns, name) {
                    tracing::info!(namespace = %ns, name = %name, "release catalog: OpenStackVersion deleted");
                    self.replace(next, metrics, sink);
                } else {
                    metrics.confirmed(self.current.len());
                }
            }
        }
    }

    fn failed<S: Fn(Arc<Snapshot>)>(
        &mut self,
        error: &watcher::Error,
        metrics: &ReleaseMetrics,
        sink: &S,
    ) {
        if crd_absent(error) {
            metrics.sync("crd-absent");
            if !self.crd_absent_logged {
                tracing::warn!(
                    "release catalog: the OpenStackVersion CRD ({PLURAL}.{GROUP}/{VERSION}) is not \
                     installed; no live release data (static table only), retrying"
                );
                self.crd_absent_logged = true;
            }
            self.replace(Snapshot::empty(), metrics, sink);
            return;
        }
        if let Some(code) = refused(error) {
            // The API server answered and will keep answering this until someone fixes the
            // ServiceAccount's RBAC. Holding /readyz on it would turn a missing permission
            // into a webhook outage (every replica unready, failurePolicy applies), so the
            // gate opens on the snapshot already served (empty at start: static table only),
            // the failure is logged once at error and counted, and the watcher retries.
            metrics.sync("forbidden");
            if !self.refused_logged {
                tracing::error!(
                    code,
                    "release catalog: the API server refuses to list or watch OpenStackVersions \
                     ({PLURAL}.{GROUP}); grant list and watch to stackgate's ServiceAccount or \
                     run with --kube off; serving the static release table, retrying"
                );
                self.refused_logged = true;
            }
            self.open_gate();
            return;
        }
        metrics.sync("error");
        tracing::warn!(
            error = %error,
            openstackversions = self.current.len(),
            "release catalog: OpenStackVersion list/watch failed; serving the last snapshot, retrying"
        );
    }

    /// Publishes `next` when it differs from what is served (or nothing was published yet),
    /// marks the snapshot confirmed and opens the readiness gate once.
    fn replace<S: Fn(Arc<Snapshot>)>(
        &mut self,
        next: Snapshot,
        metrics: &ReleaseMetrics,
        sink: &S,
    ) {
        if !self.published || next != self.current {
            self.current = next;
            sink(Arc::new(self.current.clone()));
            self.published = true;
        }
        metrics.confirmed(self.current.len());
        self.open_gate();
    }

    /// Runs `on_first_list` (opens the readiness gate) the first time only.
    fn open_gate(&mut self) {
        if let Some(first) = self.on_first_list.take() {
            first();
        }
    }
}

fn decode(obj: &DynamicObject, metrics: &ReleaseMetrics) -> Option<(String, String, VersionState)> {
    match VersionState::from_object(obj) {
        Ok(v) => Some(v),
        Err(error) => {
            metrics.sync("undecodable");
            tracing::warn!(%error, "release catalog: skipping an OpenStackVersion");
            None
        }
    }
}

/// A 404 on the list: the resource type does not exist (CRD not installed).
/// The HTTP status the API server answered a failed list or watch with, when it answered.
fn api_status(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

/// The HTTP status when the API server refused the request for lack of permission (401, 403).
fn refused(error: &watcher::Error) -> Option<u16> {
    api_status(error).filter(|code| matches!(code, 401 | 403))
}

fn crd_absent(error: &watcher::Error) -> bool {
    api_status(error) == Some(404)
}

/// Exponential backoff without jitter (one watcher per replica; no herd to spread).
#[derive(Debug)]
struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next: initial,
        }
    }

    fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let got: Vec<u128> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [100, 200, 350, 350]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn resource_path_names() {
        let r = api_resource();
        assert_eq!(r.api_version, "core.openstack.org/v1beta1");
        assert_eq!(r.plural, "openstackversions");
    }
}
