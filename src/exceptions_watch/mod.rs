//! `StackgateException` objects in `serve` (issue 37): a watcher over each namespace the chart
//! accepts exceptions in keeps the parsed set in an [`ExceptionCell`], and [`ExceptionSource`]
//! hands it to every review with the review's instant ([`Facts::of_exceptions`]), so the end
//! of an exception needs no event: each review compares with its own clock.
//!
//! * Each object is parsed with the strict parser when it arrives ([`Exception::parse`]); one
//!   it refuses exempts nothing, is logged once per version read (at warn, with the reason)
//!   and counted as `invalid`. The set holds at most [`MAX_EXCEPTIONS`]; past it, the rest
//!   are refused the same way.
//! * Only the configured namespaces are listed and watched (RBAC grants no more), so an
//!   exception elsewhere is never read.
//! * A 401/403 (no RBAC) or a 404 (CRD not installed) is logged once and retried with
//!   kube-runtime's backoff; the set stays what it was (empty at start). The first definite
//!   answer (every namespace listed, or a refusal) opens the `exceptions` readiness gate, so
//!   a replica never answers before it knows the exceptions, and a missing CRD never holds
//!   readiness.
//! * `stackgate_exceptions{policy,state}` (`active`, `expiring`, `expired`, `invalid`) is recomputed
//!   on every change and every [`STATE_REFRESH`], since states move with the clock alone.

pub mod list;

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::admission::{FactSource, Gather, KnownFacts, Webhook};
use crate::engine::{Engine, Facts};
use crate::fact_watcher::FactCell;
use crate::policy::API_VERSION;
use crate::policy::exception::{
    EXCEPTION_KIND, Exception, ExceptionRules, ExceptionSet, MAX_EXCEPTIONS,
};

/// The CRD's plural (`stackgateexceptions.stackgate.dev`).
pub const PLURAL: &str = "stackgateexceptions";

/// How often the state gauges are recomputed without an event.
pub const STATE_REFRESH: Duration = Duration::from_secs(30);

/// The exceptions `serve` knows, shared by the watcher (writer) and the source (readers).
pub type ExceptionCell = FactCell<ExceptionSet>;

/// The exceptions as a [`FactSource`]: every review gets the current set at the instant the
/// review arrives (read here, in the adapter: the engine reads no clock).
#[derive(Debug, Clone)]
pub struct ExceptionSource {
    cell: ExceptionCell,
}

impl ExceptionSource {
    /// The source over `cell` (filled by [`run`], or by a test).
    pub fn new(cell: ExceptionCell) -> Self {
        ExceptionSource { cell }
    }
}

impl FactSource for ExceptionSource {
    fn wants(&self, _webhook: Webhook, _body: &[u8], _engine: &Engine) -> Option<Arc<dyn Gather>> {
        let set = self.cell.get();
        if set.exceptions.is_empty() {
            return None;
        }
        let at = set.at(Timestamp::now());
        Some(Arc::new(KnownFacts(Facts::of_exceptions(Arc::new(at)))))
    }
}

/// Labels of `stackgate_exceptions`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    /// The policy the exceptions name; empty for `invalid` (a refused object's policy is not
    /// trusted: it may name no policy of the set). Bounded by the policy set, since an
    /// exception naming another policy is refused.
    pub policy: String,
    /// `active`, `expiring`, `expired` or `invalid`.
    pub state: &'static str,
}

/// `stackgate_exceptions{policy,state}`. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ExceptionMetrics {
    states: Family<StateLabels, Gauge<i64, AtomicI64>>,
}

impl ExceptionMetrics {
    /// Registers the gauge (the registry adds the `stackgate` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "exceptions",
            "StackgateException objects read, by state: active, expiring (inside the warning \
             window), expired (exempt nothing; the platform team's record) and invalid \
             (refused by the strict parser; exempt nothing)",
            self.states.clone(),
        );
    }

    /// Sets the count of each policy and state for `set` at `now`, with `invalid` refused
    /// objects. The series of a policy with no exception left are dropped, not kept at a
    /// stale count.
    pub fn observe(&self, set: &ExceptionSet, invalid: usize, now: Timestamp) {
        let mut counts: BTreeMap<(&str, &'static str), i64> = BTreeMap::new();
        for e in &set.exceptions {
            for state in ["active", "expiring", "expired"] {
                counts.entry((e.policy.as_str(), state)).or_default();
            }
            let state = e.state(now, &set.rules).as_str();
            *counts.entry((e.policy.as_str(), state)).or_default() += 1;
        }
        self.states.clear();
        for ((policy, state), n) in counts {
            self.states
                .get_or_create(&StateLabels {
                    policy: policy.to_owned(),
                    state,
                })
                .set(n);
        }
        self.states
            .get_or_create(&StateLabels {
                policy: String::new(),
                state: "invalid",
            })
            .set(i64::try_from(invalid).unwrap_or(i64::MAX));
    }
}

/// What the watcher keeps of each object: the parsed exception, or why it was refused.
type Parsed = Result<Exception, String>;

/// The objects of every namespace, by namespace and name.
#[derive(Debug, Default)]
pub struct Objects {
    by_name: BTreeMap<(String, String), Parsed>,
}

impl Objects {
    /// Parses `object` and keeps the result (replacing its earlier version); returns the
    /// refusal, to be logged, when it is refused.
    pub fn apply(
        &mut self,
        object: &DynamicObject,
        engine: &Engine,
        rules: &ExceptionRules,
        now: Timestamp,
    ) -> Option<String> {
        let key = key_of(object);
        let source = format!("StackgateException {}/{}", key.0, key.1);
        // Items of a list may come without apiVersion and kind (the apiserver leaves them out
        // of list items of built-in kinds; a client may do so for any): the resource listed
        // says what they are.
        let typed;
        let object = match &object.types {
            Some(_) => object,
            None => {
                typed = DynamicObject {
                    types: Some(kube::core::TypeMeta {
                        api_version: API_VERSION.to_owned(),
                        kind: EXCEPTION_KIND.to_owned(),
                    }),
                    ..object.clone()
                };
                &typed
            }
        };
        let parsed = serde_json::to_string(object)
            .map_err(|e| format!("{source}: {e}"))
            .and_then(|text| {
                Exception::parse(&source, &text, engine.policies(), rules, now)
                    .map_err(|e| e.to_string())
            });
        let refused = parsed.as_ref().err().cloned();
        self.by_name.insert(key, parsed);
        refused
    }

    /// Every object read, by namespace and name, parsed or refused.
    pub fn entries(&self) -> impl Iterator<Item = (&(String, String), &Result<Exception, String>)> {
        self.by_name.iter()
    }

    /// Forgets `object`.
    pub fn delete(&mut self, object: &DynamicObject) {
        self.by_name.remove(&key_of(object));
    }

    /// Forgets every object of `namespace` (a relist starts).
    pub fn clear_namespace(&mut self, namespace: &str) {
        self.by_name.retain(|(ns, _), _| ns != namespace);
    }

    /// The set (at most [`MAX_EXCEPTIONS`], in namespace and name order) and how many
    /// objects were refused, counting those past the cap.
    pub fn set(&self, rules: &ExceptionRules) -> (ExceptionSet, usize) {
        let mut exceptions = Vec::new();
        let mut invalid = 0;
        for parsed in self.by_name.values() {
            match parsed {
                Ok(e) if exceptions.len() < MAX_EXCEPTIONS => exceptions.push(e.clone()),
                _ => invalid += 1,
            }
        }
        let set = ExceptionSet {
            exceptions,
            rules: rules.clone(),
        };
        (set, invalid)
    }
}

fn key_of(object: &DynamicObject) -> (String, String) {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

/// The exceptions' API resource.
pub fn api_resource() -> ApiResource {
    let (group, version) = API_VERSION.split_once('/').unwrap_or(("", API_VERSION));
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, EXCEPTION_KIND),
        PLURAL,
    )
}

type WatchItem = Result<Event<DynamicObject>, watcher::Error>;

/// Lists and watches the exceptions of `rules.namespaces` until the task is aborted, keeping
/// `cell` current; `on_first` runs once, after the first definite answer.
pub async fn run<F>(
    client: kube::Client,
    engine: Engine,
    rules: ExceptionRules,
    cell: ExceptionCell,
    metrics: ExceptionMetrics,
    on_first: F,
) where
    F: FnOnce() + Send + 'static,
{
    let resource = api_resource();
    let streams: Vec<BoxStream<'static, (usize, WatchItem)>> = rules
        .namespaces
        .iter()
        .enumerate()
        .map(|(index, namespace)| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .map(move |item| (index, item))
                .boxed()
        })
        .collect();
    let mut stream = pin!(futures::stream::select_all(streams));
    let mut ticks = tokio::time::interval(STATE_REFRESH);
    let mut on_first = Some(on_first);
    let mut objects = Objects::default();
    let mut listed = vec![false; rules.namespaces.len()];
    let mut refused_logged = false;
    let mut invalid = 0;
    loop {
        let (index, item) = tokio::select! {
            next = stream.next() => match next {
                Some(next) => next,
                None => return,
            },
            _ = ticks.tick() => {
                metrics.observe(&cell.get(), invalid, Timestamp::now());
                continue;
            }
        };
        let namespace = &rules.namespaces[index];
        let changed = match item {
            Ok(Event::Init) => {
                objects.clear_namespace(namespace);
                false
            }
            Ok(Event::InitApply(o) | Event::Apply(o)) => {
                if let Some(reason) = objects.apply(&o, &engine, &rules, Timestamp::now()) {
                    tracing::warn!(%reason, "StackgateException refused; it exempts nothing");
                }
                listed.iter().all(|l| *l)
            }
            Ok(Event::Delete(o)) => {
                objects.delete(&o);
                listed.iter().all(|l| *l)
            }
            Ok(Event::InitDone) => {
                refused_logged = false;
                listed[index] = true;
                listed.iter().all(|l| *l)
            }
            Err(error) => {
                let code = match &error {
                    watcher::Error::InitialListFailed(kube::Error::Api(s))
                    | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => Some(s.code),
                    _ => None,
                };
                if matches!(code, Some(401 | 403 | 404)) {
                    if !refused_logged {
                        tracing::warn!(
                            code,
                            %namespace,
                            "StackgateException: cannot list or watch stackgateexceptions \
                             (404: the CRD is not installed; 403: grant list and watch in this \
                             namespace); no exception applies from it; retrying"
                        );
                        refused_logged = true;
                    }
                    if let Some(first) = on_first.take() {
                        first();
                    }
                } else {
                    tracing::warn!(%error, %namespace, "StackgateException watch failed; keeping the last set, retrying");
                }
                false
            }
        };
        if changed {
            let (set, refused) = objects.set(&rules);
            invalid = refused;
            tracing::info!(
                exceptions = set.exceptions.len(),
                invalid,
                "StackgateExceptions read"
            );
            metrics.observe(&set, invalid, Timestamp::now());
            cell.set(set);
            if let Some(first) = on_first.take() {
                first();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PolicySet;

    fn object(name: &str, expires: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "stackgate.dev/v1alpha1",
            "kind": "StackgateException",
            "metadata": {"name": name, "namespace": "stackgate",
                         "creationTimestamp": "2026-11-28T00:00:00Z",
                         "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
            "spec": {"policy": "serial-lb-api-calls",
                     "match": {"kinds": ["HelmRelease"], "namespaces": ["tenant-a"]},
                     "reason": "CHG-1", "expires": expires}
        }))
        .unwrap()
    }

    #[test]
    fn objects_fold_into_a_set_and_refused_ones_are_counted() {
        let engine = Engine::new(PolicySet::embedded().unwrap());
        let rules = ExceptionRules::default();
        let now: Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        let mut objects = Objects::default();
        assert!(
            objects
                .apply(&object("a", "2026-12-01T00:00:00Z"), &engine, &rules, now)
                .is_none()
        );
        assert!(
            objects
                .apply(&object("b", "2027-01-20T00:00:00Z"), &engine, &rules, now)
                .is_none()
        );
        let refused = objects
            .apply(&object("c", "2031-01-01T00:00:00Z"), &engine, &rules, now)
            .expect("over the lifetime");
        assert!(
            refused.starts_with("StackgateException stackgate/c: spec.expires"),
            "{refused}"
        );
        let (set, invalid) = objects.set(&rules);
        assert_eq!(invalid, 1);
        let names: Vec<_> = set.exceptions.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let metrics = ExceptionMetrics::default();
        metrics.observe(&set, invalid, now);
        let series = |policy: &str, state| StateLabels {
            policy: policy.to_owned(),
            state,
        };
        let count = |state| {
            let policy = if state == "invalid" {
                ""
            } else {
                "serial-lb-api-calls"
            };
            metrics.states.get_or_create(&series(policy, state)).get()
        };
        assert_eq!(
            (
                count("active"),
                count("expiring"),
                count("expired"),
                count("invalid")
            ),
            (1, 1, 0, 1)
        );
        metrics.observe(&set, invalid, "2026-12-02T00:00:00Z".parse().unwrap());
        assert_eq!((count("expired"), count("expiring")), (1, 0));
        // A new version replaces the refused one; a delete forgets; a relist clears.
        objects.apply(&object("c", "2026-12-10T00:00:00Z"), &engine, &rules, now);
        objects.delete(&object("a", "2026-12-01T00:00:00Z"));
        let (set, invalid) = objects.set(&rules);
        let names: Vec<_> = set.exceptions.iter().map(|e| e.name.as_str()).collect();
        assert_eq!((names, invalid), (vec!["b", "c"], 0));
        objects.clear_namespace("stackgate");
        assert!(objects.set(&rules).0.exceptions.is_empty());
        // No exception left: the policy's series are dropped, not kept at a stale count.
        let mut registry = prometheus_client::registry::Registry::with_prefix("stackgate");
        metrics.register(&mut registry);
        let exported = |registry: &prometheus_client::registry::Registry| {
            let mut text = String::new();
            prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
            text
        };
        assert!(
            exported(&registry).contains(
                r#"stackgate_exceptions{policy="serial-lb-api-calls",state="expired"} 1"#
            ),
            "{}",
            exported(&registry)
        );
        metrics.observe(&objects.set(&rules).0, 0, now);
        let text = exported(&registry);
        assert!(!text.contains("serial-lb-api-calls"), "{text}");
        assert!(
            text.contains(r#"stackgate_exceptions{policy="",state="invalid"} 0"#),
            "{text}"
        );
    }
}
