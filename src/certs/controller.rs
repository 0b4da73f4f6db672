//! The adapter of the self-managed certificate: the Kubernetes side of [`super::rotation`].
//!
//! Two tasks run in every replica:
//!
//! - [`run_rotation`]: contests a Lease (the background audit's election,
//!   [`crate::audit::background::hold`]); the holder reads the one Secret, the two webhook
//!   configurations it names, decides ([`decide`]) and performs the action, until the machine
//!   says wait. Writes to the Secret are replaces carrying its resourceVersion (a concurrent
//!   write answers 409 and is decided again). A failed round is retried with exponential
//!   backoff (1 s doubling to 60 s) and counted in `stackgate_tls_rotation_failures_total`.
//! - [`run_loader`]: watches the Secret (an API watch of that one name) and hands each new
//!   serving certificate to `install` (the server's resolver) without a restart; then reports
//!   what it loaded as an annotation of the Secret itself,
//!   `loaded.tls.stackgate.dev/<identity>: <digest> <unix seconds>`, again every report
//!   interval. The Secret, not a Lease or the Pod, carries the reports because the replicas
//!   already need `update` on that one Secret (any of them may be elected): reporting needs
//!   no further RBAC, where a Pod annotation needs `patch` on every Pod of the namespace
//!   (Pod names are not known in advance, so no `resourceNames`) and per-replica Leases need
//!   `create` on Leases (which `resourceNames` cannot restrict).
//!
//! Only webhook configurations with the names given and the label
//! `app.kubernetes.io/part-of: stackgate` are ever changed: another product's configuration
//! of the same name is refused and logged. Secret content never reaches a log line or a
//! metric label.

use std::collections::BTreeMap;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::Notify;

use super::pki::{self, Material, PkiError};
use super::rotation::{Action, Policy, Published, Report, decide};
use crate::audit::background::{LeaseRef, hold};

/// The label every webhook configuration stackgate changes must carry, with this value.
pub const PART_OF_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "stackgate");
/// The annotation prefix of the replicas' reports (`loaded.tls.stackgate.dev/<identity>`).
pub const REPORT_PREFIX: &str = "loaded.tls.stackgate.dev/";
/// The annotation recording the bundle last published into the webhooks: `<digest> <unix>`.
pub const PUBLISHED_ANNOTATION: &str = "tls.stackgate.dev/published-bundle";
/// Default `--tls-lease-name`.
pub const DEFAULT_LEASE_NAME: &str = "stackgate-certs";
/// Actions performed per round at most before the round yields (a fresh Secret takes three:
/// create, publish, wait).
const MAX_STEPS: usize = 8;
/// First retry after a failed round; doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between retries of a failing round.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Settings of the self-managed certificate; the `serve` flags fill it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelfManagedConfig {
    /// Namespace of the Secret and the Lease (the release namespace).
    pub namespace: String,
    /// The Secret's name.
    pub secret_name: String,
    /// The names of stackgate's MutatingWebhookConfiguration and
    /// ValidatingWebhookConfiguration (either may be absent in the cluster).
    pub webhook_configuration: String,
    /// DNS names of the serving certificate (the Service's names).
    pub dns_names: Vec<String>,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// The Lease electing the replica that rotates.
    pub lease_name: String,
    /// How long the Lease stays held without renewal.
    pub lease_duration: Duration,
    /// Lifetimes and waits.
    pub policy: Policy,
}

/// Why one round failed. Never carries Secret content.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// An API request failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// Certificates could not be made.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// A webhook configuration of that name exists but is not stackgate's.
    #[error(
        "the {kind} {name} does not carry the label {}={}: not stackgate's, left alone",
        PART_OF_LABEL.0,
        PART_OF_LABEL.1
    )]
    NotOurs {
        /// Its kind.
        kind: &'static str,
        /// Its name.
        name: String,
    },
}

fn api(what: &'static str) -> impl FnOnce(kube::Error) -> RotationError {
    move |source| RotationError::Api { what, source }
}

/// Labels of `stackgate_tls_rotations_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// `create`, `renew`, `ca_rotation_start`, `ca_switch`, `ca_drop`, `publish`, `tidy`.
    pub action: &'static str,
}

/// Metrics of the self-managed certificate.
#[derive(Clone, Debug, Default)]
pub struct RotationMetrics {
    rotations: Family<ActionLabels, Counter>,
    failures: Counter,
    leader: Gauge<i64, AtomicI64>,
}

impl RotationMetrics {
    /// Registers every metric (names get the registry's `stackgate` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "tls_rotations",
            "Writes of the self-managed certificate Secret and webhook caBundles, per action",
            self.rotations.clone(),
        );
        registry.register(
            "tls_rotation_failures",
            "Rounds of the self-managed certificate rotation that failed (retried with backoff)",
            self.failures.clone(),
        );
        registry.register(
            "tls_rotation_leader",
            "1 while this replica holds the self-managed certificate Lease",
            self.leader.clone(),
        );
    }
}

fn action_label(action: Action) -> &'static str {
    match action {
        Action::Create => "create",
        Action::Tidy => "tidy",
        Action::RenewServing(_) => "renew",
        Action::PublishBundle => "publish",
        Action::StartCaRotation => "ca_rotation_start",
        Action::SwitchToNextCa => "ca_switch",
        Action::DropPreviousCa => "ca_drop",
        Action::Wait { .. } => "wait",
    }
}

fn unix_now() -> i64 {
    Timestamp::now().as_second()
}

/// The replicas' reports and the published record, from the Secret's annotations.
fn annotations_of(meta: &ObjectMeta) -> (Vec<Report>, Option<Published>) {
    let Some(annotations) = &meta.annotations else {
        return (Vec::new(), None);
    };
    let split = |value: &str| {
        let (digest, at) = value.split_once(' ')?;
        Some((digest.to_owned(), at.parse::<i64>().ok()?))
    };
    let reports = annotations
        .iter()
        .filter_map(|(key, value)| {
            let identity = key.strip_prefix(REPORT_PREFIX)?;
            let (digest, at) = split(value)?;
            Some(Report {
                identity: identity.to_owned(),
                digest,
                at,
            })
        })
        .collect();
    let published = annotations
        .get(PUBLISHED_ANNOTATION)
        .and_then(|v| split(v))
        .map(|(bundle_digest, at)| Published { bundle_digest, at });
    (reports, published)
}

fn data_of(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

/// stackgate's webhook configurations: each present one, checked to be stackgate's.
struct Webhooks {
    mutating: Option<MutatingWebhookConfiguration>,
    validating: Option<ValidatingWebhookConfiguration>,
}

fn ours(meta: &ObjectMeta, kind: &'static str, name: &str) -> Result<(), RotationError> {
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(PART_OF_LABEL.0))
        .is_some_and(|v| v == PART_OF_LABEL.1);
    if labelled {
        Ok(())
    } else {
        Err(RotationError::NotOurs {
            kind,
            name: name.to_owned(),
        })
    }
}

impl Webhooks {
    async fn read(client: &kube::Client, name: &str) -> Result<Self, RotationError> {
        let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
            .get_opt(name)
            .await
            .map_err(api("read the MutatingWebhookConfiguration"))?;
        let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .get_opt(name)
            .await
            .map_err(api("read the ValidatingWebhookConfiguration"))?;
        if let Some(m) = &mutating {
            ours(&m.metadata, "MutatingWebhookConfiguration", name)?;
        }
        if let Some(v) = &validating {
            ours(&v.metadata, "ValidatingWebhookConfiguration", name)?;
        }
        Ok(Self {
            mutating,
            validating,
        })
    }

    /// The `caBundle` of every webhook, in order.
    fn bundles(&self) -> Vec<Option<&[u8]>> {
        let m = self
            .mutating
            .iter()
            .flat_map(|c| c.webhooks.iter().flatten());
        let v = self
            .validating
            .iter()
            .flat_map(|c| c.webhooks.iter().flatten());
        m.map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()))
            .chain(v.map(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice())))
            .collect()
    }

    fn all_match(&self, bundle: &[u8]) -> bool {
        self.bundles().iter().all(|b| *b == Some(bundle))
    }

    /// Sets every webhook's `caBundle` (a replace with the resourceVersion read).
    async fn publish(
        mut self,
        client: &kube::Client,
        name: &str,
        bundle: &[u8],
    ) -> Result<(), RotationError> {
        let value = || Some(ByteString(bundle.to_vec()));
        if let Some(mut m) = self.mutating.take() {
            for w in m.webhooks.iter_mut().flatten() {
                w.client_config.ca_bundle = value();
            }
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .replace(name, &PostParams::default(), &m)
                .await
                .map_err(api("patch the MutatingWebhookConfiguration's caBundle"))?;
        }
        if let Some(mut v) = self.validating.take() {
            for w in v.webhooks.iter_mut().flatten() {
                w.client_config.ca_bundle = value();
            }
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .replace(name, &PostParams::default(), &v)
                .await
                .map_err(api("patch the ValidatingWebhookConfiguration's caBundle"))?;
        }
        Ok(())
    }
}

/// One decision and its action as the Lease holder. Returns the machine's wait (Unix seconds)
/// when it says wait.
async fn step(
    client: &kube::Client,
    config: &SelfManagedConfig,
    metrics: &RotationMetrics,
) -> Result<Option<i64>, RotationError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let secret = secrets
        .get_opt(&config.secret_name)
        .await
        .map_err(api("read the certificate Secret"))?;
    let data = secret.as_ref().map(data_of).unwrap_or_default();
    let mut material = Material::from_data(&data);
    let webhooks = Webhooks::read(client, &config.webhook_configuration).await?;
    let mut observed = material.observe();
    let bundle = material.bundle();
    observed.webhooks_match = webhooks.all_match(bundle.as_bytes());
    if let Some(secret) = &secret {
        (observed.reports, observed.published) = annotations_of(&secret.metadata);
    }
    let now = unix_now();
    let action = decide(&observed, &config.policy, now);
    let policy = &config.policy;
    let names = &config.dns_names;
    match action {
        Action::Wait { until, .. } => return Ok(Some(until)),
        Action::Create => material = Material::create(policy, now, names)?,
        Action::Tidy => {}
        Action::RenewServing(_) => material.renew_serving(policy, now, names)?,
        Action::StartCaRotation => material.start_ca_rotation(policy, now)?,
        Action::SwitchToNextCa => material.switch_to_next_ca(policy, now, names)?,
        Action::DropPreviousCa => material.drop_previous_ca(),
        Action::PublishBundle => {
            webhooks
                .publish(client, &config.webhook_configuration, bundle.as_bytes())
                .await?;
            let record = format!("{} {}", observed.bundle_digest, unix_now());
            let patch = json!({"metadata": {"annotations": {PUBLISHED_ANNOTATION: record}}});
            secrets
                .patch(
                    &config.secret_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map_err(api("record the published bundle"))?;
            metrics
                .rotations
                .get_or_create(&ActionLabels { action: "publish" })
                .inc();
            tracing::info!(%action, "self-managed TLS");
            return Ok(None);
        }
    }
    let data = material
        .to_data()
        .into_iter()
        .map(|(k, v)| (k, ByteString(v)))
        .collect();
    match secret {
        Some(mut secret) => {
            secret.data = Some(data);
            secret.string_data = None;
            secrets
                .replace(&config.secret_name, &PostParams::default(), &secret)
                .await
                .map_err(api("write the certificate Secret"))?;
        }
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(config.secret_name.clone()),
                    namespace: Some(config.namespace.clone()),
                    labels: Some(BTreeMap::from([(
                        PART_OF_LABEL.0.to_owned(),
                        PART_OF_LABEL.1.to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                type_: Some("Opaque".to_owned()),
                data: Some(data),
                ..Secret::default()
            };
            secrets
                .create(&PostParams::default(), &secret)
                .await
                .map_err(api("create the certificate Secret"))?;
        }
    }
    metrics
        .rotations
        .get_or_create(&ActionLabels {
            action: action_label(action),
        })
        .inc();
    tracing::info!(%action, secret = %config.secret_name, "self-managed TLS");
    Ok(None)
}

/// Runs forever: contests the Lease every third of its duration and, while holding it,
/// rotates. Wakes early when the Secret changes (`changed`, notified by [`run_loader`]).
pub async fn run_rotation(
    client: kube::Client,
    config: SelfManagedConfig,
    metrics: RotationMetrics,
    changed: Arc<Notify>,
) {
    let tick = (config.lease_duration / 3).max(Duration::from_secs(1));
    let mut backoff = FIRST_BACKOFF;
    loop {
        let lease = LeaseRef {
            namespace: &config.namespace,
            name: &config.lease_name,
            identity: &config.identity,
            duration: config.lease_duration,
        };
        let mut wait = tick;
        match hold(&client, &lease, Timestamp::now()).await {
            Ok(true) => {
                metrics.leader.set(1);
                match round(&client, &config, &metrics).await {
                    Ok(until) => {
                        backoff = FIRST_BACKOFF;
                        let seconds = until.saturating_sub(unix_now()).max(0).unsigned_abs();
                        wait = wait.min(Duration::from_secs(seconds));
                    }
                    Err(error) => {
                        metrics.failures.inc();
                        tracing::warn!(
                            error = %crate::telemetry::error_chain(&error),
                            retry_seconds = backoff.as_secs(),
                            "self-managed TLS: rotation round failed"
                        );
                        wait = backoff;
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                };
            }
            Ok(false) => {
                metrics.leader.set(0);
            }
            Err(error) => {
                metrics.leader.set(0);
                metrics.failures.inc();
                tracing::warn!(%error, "self-managed TLS: cannot contest the Lease");
            }
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = changed.notified() => {}
        }
    }
}

/// Steps until the machine says wait (its deadline) or [`MAX_STEPS`] are done (decide again
/// at once, next round). A 409 ends the round without an error: decided again at once.
async fn round(
    client: &kube::Client,
    config: &SelfManagedConfig,
    metrics: &RotationMetrics,
) -> Result<i64, RotationError> {
    for _ in 0..MAX_STEPS {
        match step(client, config, metrics).await {
            Ok(Some(until)) => return Ok(until),
            Ok(None) => {}
            Err(RotationError::Api {
                source: kube::Error::Api(status),
                ..
            }) if status.code == 409 => return Ok(unix_now()),
            Err(error) => return Err(error),
        }
    }
    Ok(unix_now())
}

/// What the loader hands to the server: the serving certificate and key (PEM). The server
/// answers whether it went into service (a broken pair keeps the previous one).
pub type Install = Box<dyn Fn(&[u8], &[u8]) -> bool + Send + Sync>;

/// Runs forever: watches the Secret, installs each new serving certificate, reports what is
/// loaded (on change and every report interval), and notifies `changed` on every event.
pub async fn run_loader(
    client: kube::Client,
    config: SelfManagedConfig,
    install: Install,
    changed: Arc<Notify>,
) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let settings =
        watcher::Config::default().fields(&format!("metadata.name={}", config.secret_name));
    let mut events = pin!(watcher::watcher(secrets.clone(), settings));
    let report_every = Duration::from_secs(config.policy.report_interval.unsigned_abs().max(1));
    let mut ticker = tokio::time::interval(report_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The serving pair in service, and the digest of what was loaded.
    let mut installed: Option<(Vec<u8>, Vec<u8>)> = None;
    let mut loaded: Option<String> = None;
    let mut reported: Option<String> = None;
    loop {
        let mut report_due = false;
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(secret) | watcher::Event::InitApply(secret))) => {
                    changed.notify_one();
                    let data = data_of(&secret);
                    let pair = data.get(pki::TLS_CRT).zip(data.get(pki::TLS_KEY));
                    if let Some((cert, key)) = pair {
                        let fresh = installed.as_ref().is_none_or(|(c, k)| c != cert || k != key);
                        if fresh && install(cert, key) {
                            installed = Some((cert.clone(), key.clone()));
                        }
                    }
                    if let Some((cert, _)) = &installed {
                        let bundle = data.get(pki::CA_BUNDLE).map_or(&[][..], Vec::as_slice);
                        // Only what is served counts as loaded: a Secret whose new pair was
                        // refused still reports the digest of the pair in service.
                        if data.get(pki::TLS_CRT) == Some(cert) {
                            loaded = Some(pki::loaded_digest(cert, bundle));
                        }
                    }
                    report_due = loaded != reported;
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => {
                    tracing::warn!(%error, "self-managed TLS: watching the certificate Secret");
                    tokio::time::sleep(FIRST_BACKOFF).await;
                }
                None => return,
            },
            _ = ticker.tick() => report_due = loaded.is_some(),
        }
        if let (true, Some(digest)) = (report_due, &loaded) {
            let key = format!("{REPORT_PREFIX}{}", config.identity);
            let value = format!("{digest} {}", unix_now());
            let patch = json!({"metadata": {"annotations": {key: value}}});
            match secrets
                .patch(
                    &config.secret_name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => reported = Some(digest.clone()),
                Err(error) => {
                    tracing::warn!(%error, "self-managed TLS: cannot report the loaded certificate");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(annotations: &[(&str, &str)], labels: &[(&str, &str)]) -> ObjectMeta {
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        ObjectMeta {
            annotations: map(annotations),
            labels: map(labels),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn reports_and_the_published_record_are_read_from_annotations() {
        let (reports, published) = annotations_of(&meta(
            &[
                ("loaded.tls.stackgate.dev/pod-a", "abc 100"),
                ("loaded.tls.stackgate.dev/pod-b", "not-a-report"),
                ("loaded.tls.stackgate.dev/pod-c", "abc soon"),
                ("other/pod-d", "abc 100"),
                (PUBLISHED_ANNOTATION, "def 90"),
            ],
            &[],
        ));
        assert_eq!(
            reports,
            [Report {
                identity: "pod-a".to_owned(),
                digest: "abc".to_owned(),
                at: 100
            }]
        );
        assert_eq!(
            published,
            Some(Published {
                bundle_digest: "def".to_owned(),
                at: 90
            })
        );
        assert_eq!(annotations_of(&ObjectMeta::default()), (Vec::new(), None));
    }

    #[test]
    fn only_a_configuration_labelled_part_of_stackgate_is_ours() {
        let name = "stackgate";
        assert!(ours(&meta(&[], &[PART_OF_LABEL]), "Mutating", name).is_ok());
        let error = ours(
            &meta(&[], &[("app.kubernetes.io/part-of", "kyverno")]),
            "MutatingWebhookConfiguration",
            name,
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "the MutatingWebhookConfiguration stackgate does not carry the label \
             app.kubernetes.io/part-of=stackgate: not stackgate's, left alone"
        );
        assert!(ours(&meta(&[], &[]), "Validating", name).is_err());
    }
}
