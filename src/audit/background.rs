//! The background audit of `stackgate serve --background-audit`: one elected replica
//! re-audits the cluster on a period and publishes the results as PolicyReports.
//!
//! Election is a `coordination.k8s.io/v1` Lease ([`hold_lease`]): a replica holds it while it
//! renews it before `leaseDurationSeconds` run out; another takes it over only after that,
//! and every take-over is a replace with the Lease's resourceVersion, so two replicas never
//! both win the same round (the loser gets 409 and waits). Only the holder audits.
//!
//! Results are published as `wgpolicyk8s.io/v1alpha2` reports, the format Policy Reporter and
//! Kyverno read: one `PolicyReport` named [`REPORT_NAME`] per namespace with findings and one
//! `ClusterPolicyReport` for cluster-scoped subjects, written with server-side apply (field
//! manager [`FIELD_MANAGER`]). Reports are bounded: only `fail` (denials) and `warn`
//! (warnings, CCM restarts) results by default, at most `max_results` per report and each
//! message cut at [`MAX_MESSAGE_CHARS`] (Kyverno's admission reports once filled etcd past its
//! quota, kyverno#8974), and there are never per-request reports. A namespace whose findings
//! are fixed gets its report emptied on the next run, so consumers see it clear.
//!
//! Besides the period, the holder re-audits soon after a change: it runs one metadata-only
//! watch per covered kind ([`spawn_watches`], the selections of [`super::targets`]) that only
//! signals "something changed" and keeps no objects. Changes are coalesced: the re-audit
//! starts [`BackgroundConfig::debounce`] after the first change, at most one audit runs at a
//! time, and audits start at most once per `debounce`. A kind the cluster does not serve (404)
//! or this replica may not watch (403) is logged once and probed again after a period.
//!
//! While an audit runs, the Lease is renewed alongside it every third of its duration; when a
//! renewal finds another holder (or fails for a whole Lease duration), the round stops and
//! publishes nothing, so a replica that lost the Lease never overwrites the new holder's
//! reports.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::{Duration, Instant};

use futures::StreamExt;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::page::ReadLimits;
use super::{
    Audit, AuditOptions, NamespaceTally, RESTART_RULE, Selection, Tally, Target, audit,
    resource_label,
};
use crate::engine::Engine;
use crate::metrics::LimitLabels;
use crate::policy::exception::ExceptionRules;
use crate::report::{ItemKind, Level, ObjectResult, Report};
use prometheus_client::metrics::counter::Counter;

/// The name of every report stackgate writes (one per namespace, one cluster report).
pub const REPORT_NAME: &str = "stackgate";
/// The field manager of the report writes and the `managed-by` label value.
pub const FIELD_MANAGER: &str = "stackgate";
/// The label that marks stackgate's reports (used to find reports to clear).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Messages in reports are cut at this many characters.
pub const MAX_MESSAGE_CHARS: usize = 1024;
/// The cluster report's annotation counting the namespaces with findings that got no report
/// of their own (past the tally's [`super::tally::MAX_NAMED_NAMESPACES`]).
pub const NAMESPACES_LEFT_OUT: &str = "stackgate.dev/namespaces-left-out";
/// Default re-audit period.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(600);
/// Default Lease duration: a holder that does not renew for this long loses the Lease.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(60);
/// Default Lease name.
pub const DEFAULT_LEASE_NAME: &str = "stackgate-audit";
/// Default results per report.
pub const DEFAULT_MAX_RESULTS: usize = 500;
/// Default quiet time between a change of a covered object and the re-audit it triggers
/// (also the least time between two audits started by changes).
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_secs(5);

/// Settings of the background audit; the `serve` flags fill it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackgroundConfig {
    /// How often the holder re-audits.
    pub period: Duration,
    /// Namespace of the Lease (the release namespace in the chart).
    pub lease_namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// This replica's identity in the Lease (the pod name in the chart).
    pub identity: String,
    /// How long a Lease stays held without renewal.
    pub lease_duration: Duration,
    /// Results per report, at most.
    pub max_results: usize,
    /// Objects per list request.
    pub page_size: u32,
    /// How long after a change of a covered object the re-audit starts; changes within it
    /// are coalesced into one audit, and change-triggered audits start at most this often.
    pub debounce: Duration,
    /// The caps of the audit's reads.
    pub limits: ReadLimits,
    /// Bytes of memory the evaluation of one object may hold (serve's
    /// `--max-evaluation-memory`).
    pub max_evaluation_memory: usize,
    /// Which report API to write.
    pub report_api: ReportApi,
    /// The `StackgateException` rules when `serve` applies exceptions (`--watch-exceptions`):
    /// each audit reads them and reports an excepted finding as `skip` until its `expires`.
    pub exceptions: Option<ExceptionRules>,
}

/// Labels of `stackgate_audit_violations`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// The policy name (from the policy files, or `ccm-restart-needed`).
    pub policy: String,
}

/// Metrics of the background audit.
#[derive(Clone, Debug, Default)]
pub struct AuditMetrics {
    violations: Family<PolicyLabels, Gauge<i64, AtomicI64>>,
    duration: Gauge<f64, AtomicU64>,
    objects: Gauge<i64, AtomicI64>,
    last_success: Gauge<f64, AtomicU64>,
    leader: Gauge<i64, AtomicI64>,
    /// `stackgate_input_limits_total` of the server's registry, when it has one.
    input_limits: Option<Family<LimitLabels, Counter>>,
}

impl AuditMetrics {
    /// Also counts the audit's caps reached in `stackgate_input_limits_total`
    /// (`limit="audit_…"`), the family of [`crate::metrics::Metrics::input_limits`].
    pub fn counting_limits_in(mut self, input_limits: Family<LimitLabels, Counter>) -> Self {
        self.input_limits = Some(input_limits);
        self
    }
}

impl AuditMetrics {
    /// Registers every metric (names get the registry's `stackgate` prefix).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "audit_violations",
            "Current fail and warn results of the last background audit, per policy",
            self.violations.clone(),
        );
        registry.register(
            "audit_duration_seconds",
            "Wall time of the last background audit",
            self.duration.clone(),
        );
        registry.register(
            "audit_objects",
            "Objects evaluated by the last background audit",
            self.objects.clone(),
        );
        registry.register(
            "audit_last_success_timestamp_seconds",
            "Unix time the last background audit finished and published its reports",
            self.last_success.clone(),
        );
        registry.register(
            "audit_leader",
            "1 while this replica holds the audit Lease",
            self.leader.clone(),
        );
    }

    fn record(&self, audited: &Audit, took: Duration, now: Timestamp) {
        let report = &audited.report;
        // Policies that have no violations any more read 0, not their last value.
        self.violations.clear();
        for (policy, n) in &audited.violations {
            self.violations
                .get_or_create(&PolicyLabels {
                    policy: policy.clone(),
                })
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        if let Some(limits) = &self.input_limits {
            for (limit, n) in &audited.limits {
                limits
                    .get_or_create(&LimitLabels {
                        limit: limit.as_str(),
                    })
                    .inc_by(u64::try_from(*n).unwrap_or(u64::MAX));
            }
        }
        self.duration.set(took.as_secs_f64());
        self.objects
            .set(i64::try_from(report.counts().objects).unwrap_or(i64::MAX));
        self.last_success.set(now.as_millisecond() as f64 / 1000.0);
    }
}

/// Takes or renews the Lease for `config.identity` at `now`. True when this replica holds it
/// afterwards; false when another holder's Lease is still current or another replica won
/// the same round (409).
pub async fn hold_lease(
    client: &kube::Client,
    config: &BackgroundConfig,
    now: Timestamp,
) -> Result<bool, kube::Error> {
    let lease = LeaseRef {
        namespace: &config.lease_namespace,
        name: &config.lease_name,
        identity: &config.identity,
        duration: config.lease_duration,
    };
    hold(client, &lease, now).await
}

/// One Lease and who contests it: the background audit's, or another component's that elects
/// one replica the same way (the self-managed certificate's).
#[derive(Debug, Clone, Copy)]
pub struct LeaseRef<'a> {
    /// Namespace of the Lease.
    pub namespace: &'a str,
    /// Name of the Lease.
    pub name: &'a str,
    /// This replica's identity.
    pub identity: &'a str,
    /// How long the Lease stays held without renewal.
    pub duration: Duration,
}

/// Takes or renews `lease` at `now`, as [`hold_lease`] does for the audit's Lease.
pub async fn hold(
    client: &kube::Client,
    config: &LeaseRef<'_>,
    now: Timestamp,
) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), config.namespace);
    let seconds = i32::try_from(config.duration.as_secs()).unwrap_or(i32::MAX);
    let conflict = |r: Result<Lease, kube::Error>| match r {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    };
    let Some(mut lease) = api.get_opt(config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.to_owned()),
                namespace: Some(config.namespace.to_owned()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.to_owned()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return conflict(api.create(&PostParams::default(), &lease).await);
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let mine = spec.holder_identity.as_deref() == Some(config.identity);
    let held_for =
        SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(seconds)));
    let expired = spec
        .renew_time
        .as_ref()
        .and_then(|t| t.0.checked_add(held_for).ok())
        .is_none_or(|until| until < now);
    if !mine && !expired {
        return Ok(false);
    }
    if !mine {
        spec.holder_identity = Some(config.identity.to_owned());
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(seconds);
    // A replace carries the resourceVersion read: a concurrent take-over answers 409.
    conflict(
        api.replace(config.name, &PostParams::default(), &lease)
            .await,
    )
}

/// The code of each of `o`'s items, in order: the engine's finding code (matched by level
/// and message against the verdict's structured findings), the rule name of the audit's own
/// findings (`ccm-restart-needed`), else None.
fn item_codes(o: &ObjectResult) -> Vec<Option<&'static str>> {
    let mut used = [0usize; 2];
    o.items
        .iter()
        .map(|i| {
            let (list, n) = match i.level {
                Level::Error => (&o.verdict.denials, &mut used[0]),
                Level::Warning => (&o.verdict.warnings, &mut used[1]),
                Level::Note => return None,
            };
            match list.get(*n) {
                Some(f) if f.denial_text() == i.message => {
                    *n += 1;
                    Some(f.code)
                }
                _ if i.rule == RESTART_RULE => Some(RESTART_RULE),
                _ => None,
            }
        })
        .collect()
}

/// The reports of one audit: namespace (None: the cluster report) → the report object, in
/// the `wgpolicyk8s.io/v1alpha2` shape ([`as_report_api`] turns it into the other). Each
/// keeps at most `max_results` results; its summary counts every denial and warning of the
/// namespace (`tally`, which also counts the entries the audit's report did not list).
pub fn policy_reports(
    report: &Report,
    tally: &NamespaceTally,
    max_results: usize,
    now: Timestamp,
) -> BTreeMap<Option<String>, Value> {
    let mut results: BTreeMap<Option<String>, Vec<Value>> = BTreeMap::new();
    for f in &report.files {
        // Entries are `kind/namespace/name` or `kind/name`.
        let parts: Vec<&str> = f.name.splitn(3, '/').collect();
        let (namespace, name) = match parts.as_slice() {
            [_, ns, name] => (Some((*ns).to_owned()), *name),
            [_, name] => (None, *name),
            _ => continue,
        };
        for o in &f.objects {
            let api_version = o.json["apiVersion"].as_str().unwrap_or_default();
            let kind = o.json["kind"].as_str().unwrap_or(parts[0]);
            for (i, code) in o.items.iter().zip(item_codes(o)) {
                // A finding an exception admits is `skip` until the exception's `expires`
                // (after it, the engine reports it as a finding again).
                let excepted = (i.kind == ItemKind::Excepted)
                    .then(|| {
                        o.verdict.excepted.iter().find(|e| {
                            i.message
                                .starts_with(&e.exception.describe(&e.finding.policy))
                        })
                    })
                    .flatten();
                let (result, severity) = match (excepted, i.level) {
                    (Some(_), _) => ("skip", "info"),
                    (None, _) if i.kind == ItemKind::Excepted => continue,
                    (None, Level::Error) => ("fail", "high"),
                    (None, Level::Warning) => ("warn", "medium"),
                    (None, Level::Note) => continue,
                };
                let code = code.or(excepted.map(|e| e.finding.code));
                let kept = results.entry(namespace.clone()).or_default();
                // Past the cap only the summary counts it (from `tally`).
                if kept.len() >= max_results {
                    continue;
                }
                let mut resource = json!({"apiVersion": api_version, "kind": kind, "name": name});
                if let Some(ns) = &namespace {
                    resource["namespace"] = json!(ns);
                }
                let mut entry = json!({
                    "source": "stackgate",
                    "policy": i.policy,
                    "rule": i.rule,
                    "result": result,
                    "severity": severity,
                    "message": cut(&i.message, MAX_MESSAGE_CHARS),
                    "timestamp": {"seconds": now.as_second(), "nanos": 0},
                    "resources": [resource],
                });
                // Both APIs' results carry `properties` (map[string]string): the finding's
                // code, which `stackgate explain` and docs/rules.md name.
                if let Some(code) = code {
                    entry["properties"] = json!({"code": code});
                }
                if let Some(e) = excepted {
                    entry["properties"]["exception"] =
                        json!(format!("{}/{}", e.exception.namespace, e.exception.name));
                    if let Some(expires) = &e.exception.expires {
                        entry["properties"]["expires"] = json!(expires);
                    }
                    if let Some(ticket) = &e.exception.ticket {
                        entry["properties"]["ticket"] = json!(ticket);
                    }
                }
                kept.push(entry);
            }
        }
    }
    // The namespaces of the listed results, and those the tally names (the most findings).
    let namespaces: BTreeSet<Option<String>> = results
        .keys()
        .cloned()
        .chain(tally.named().into_iter().map(|(ns, _)| ns))
        .collect();
    let mut reports: BTreeMap<Option<String>, Value> = namespaces
        .into_iter()
        .map(|namespace| {
            let kept = results.remove(&namespace).unwrap_or_default();
            let counted = |r: &str| kept.iter().filter(|v| v["result"] == r).count();
            let summary = tally.get(namespace.as_deref()).unwrap_or(Tally {
                fail: counted("fail"),
                warn: counted("warn"),
            });
            let skipped = counted("skip");
            let mut report = report_with_summary(namespace.as_deref(), kept, summary);
            report["summary"]["skip"] = json!(skipped);
            (namespace, report)
        })
        .collect();
    // The namespaces past the tally's names get no report of their own: the cluster report
    // says how many there are.
    let more = tally.more_namespaces();
    if more > 0 {
        let cluster = reports
            .entry(None)
            .or_insert_with(|| report_with_summary(None, Vec::new(), Tally::default()));
        cluster["metadata"]["annotations"][NAMESPACES_LEFT_OUT] = json!(more.to_string());
    }
    reports
}

fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_owned(),
    }
}

/// One report object with `all` results, of which at most `max_results` are kept (the
/// summary counts all of them, and an annotation says how many were left out).
pub fn report_object(namespace: Option<&str>, all: Vec<Value>, max_results: usize) -> Value {
    let count = |r: &str| all.iter().filter(|v| v["result"] == r).count();
    let summary = Tally {
        fail: count("fail"),
        warn: count("warn"),
    };
    let kept: Vec<Value> = all.into_iter().take(max_results).collect();
    report_with_summary(namespace, kept, summary)
}

/// One report object with the results `kept` and the true `summary` (which may count more
/// than are kept: an annotation says how many were left out).
fn report_with_summary(namespace: Option<&str>, kept: Vec<Value>, summary: Tally) -> Value {
    let left_out = (summary.fail + summary.warn).saturating_sub(kept.len());
    let summary =
        json!({"pass": 0, "fail": summary.fail, "warn": summary.warn, "error": 0, "skip": 0});
    let mut metadata = json!({
        "name": REPORT_NAME,
        "labels": {MANAGED_BY_LABEL: FIELD_MANAGER},
    });
    if left_out > 0 {
        metadata["annotations"] = json!({"stackgate.dev/results-left-out": left_out.to_string()});
    }
    let kind = match namespace {
        Some(ns) => {
            metadata["namespace"] = json!(ns);
            "PolicyReport"
        }
        None => "ClusterPolicyReport",
    };
    json!({
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": kind,
        "metadata": metadata,
        "summary": summary,
        "results": kept,
    })
}

/// Which report API the background audit writes (`--background-audit-report-api`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportApi {
    /// Every one of the two APIs the cluster serves (API discovery before each publish);
    /// `wgpolicyk8s.io` when it serves neither (the chart installs its CRDs).
    #[default]
    Auto,
    /// `wgpolicyk8s.io/v1alpha2` `PolicyReport` / `ClusterPolicyReport` only.
    Wgpolicyk8s,
    /// `openreports.io/v1alpha1` `Report` / `ClusterReport` only.
    Openreports,
}

/// One report API: its group, version and kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReportFormat {
    /// `wgpolicyk8s.io/v1alpha2` (Kyverno, Policy Reporter).
    Wgpolicyk8s,
    /// `openreports.io/v1alpha1`, the successor the ecosystem moves to (Policy Reporter 3.9
    /// reads both). Its fields are the same as wgpolicyk8s's, plus a report-level `source`
    /// (openreports/reports-api 769d97879794167439427e472eeaa4b936d628e2,
    /// `apis/openreports.io/v1alpha1/report_types.go`: `Report.Source`, `ReportResult` with
    /// `policy`, `rule`, `result`, `severity`, `message`, `resources`, `properties`).
    Openreports,
}

impl ReportFormat {
    /// `group/version`.
    pub fn api_version(self) -> &'static str {
        match self {
            ReportFormat::Wgpolicyk8s => "wgpolicyk8s.io/v1alpha2",
            ReportFormat::Openreports => "openreports.io/v1alpha1",
        }
    }

    /// The kind of a namespaced (`cluster` false) or cluster report.
    pub fn kind(self, cluster: bool) -> &'static str {
        match (self, cluster) {
            (ReportFormat::Wgpolicyk8s, false) => "PolicyReport",
            (ReportFormat::Wgpolicyk8s, true) => "ClusterPolicyReport",
            (ReportFormat::Openreports, false) => "Report",
            (ReportFormat::Openreports, true) => "ClusterReport",
        }
    }

    /// The API resource of a namespaced (`cluster` false) or cluster report.
    pub fn resource(self, cluster: bool) -> ApiResource {
        let (group, version) = self
            .api_version()
            .split_once('/')
            .unwrap_or(("", self.api_version()));
        ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, self.kind(cluster)))
    }
}

/// A report of [`policy_reports`] (wgpolicyk8s shape) as `format` writes it.
pub fn as_report_api(report: &Value, format: ReportFormat) -> Value {
    let mut out = report.clone();
    let cluster = report["metadata"]["namespace"].is_null();
    out["apiVersion"] = json!(format.api_version());
    out["kind"] = json!(format.kind(cluster));
    if format == ReportFormat::Openreports {
        out["source"] = json!(FIELD_MANAGER);
    }
    out
}

/// The report APIs to write under `choice`: for [`ReportApi::Auto`], those the cluster serves
/// (both namespaced and cluster kinds listed by API discovery), which may be none: writing to
/// an API that is not there would fail every round for a reason the round already knows.
pub async fn report_formats(client: &kube::Client, choice: ReportApi) -> Vec<ReportFormat> {
    match choice {
        ReportApi::Wgpolicyk8s => vec![ReportFormat::Wgpolicyk8s],
        ReportApi::Openreports => vec![ReportFormat::Openreports],
        ReportApi::Auto => {
            let mut served = Vec::new();
            for format in [ReportFormat::Wgpolicyk8s, ReportFormat::Openreports] {
                let plurals = [format.resource(false).plural, format.resource(true).plural];
                match client.list_api_group_resources(format.api_version()).await {
                    Ok(list)
                        if plurals
                            .iter()
                            .all(|p| list.resources.iter().any(|r| &r.name == p)) =>
                    {
                        served.push(format);
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(api = format.api_version(), %error, "report API not served");
                    }
                }
            }
            served
        }
    }
}

/// Writes `reports` in each of `formats` with server-side apply and empties stackgate's
/// reports in namespaces that have no findings any more. Returns the number of reports
/// written.
pub async fn publish(
    client: &kube::Client,
    reports: &BTreeMap<Option<String>, Value>,
    formats: &[ReportFormat],
) -> Result<usize, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut written = 0;
    for &format in formats {
        let mut targets: Vec<(Option<String>, Value)> = reports
            .iter()
            .map(|(ns, r)| (ns.clone(), as_report_api(r, format)))
            .collect();
        // Reports of earlier runs whose namespaces are clean now: published again, empty.
        let selector = format!("{MANAGED_BY_LABEL}={FIELD_MANAGER}");
        let namespaced: Api<DynamicObject> = Api::all_with(client.clone(), &format.resource(false));
        let existing = namespaced
            .list_metadata(&ListParams::default().labels(&selector))
            .await?;
        let mut clean: BTreeSet<Option<String>> = existing
            .items
            .iter()
            .filter(|r| r.metadata.name.as_deref() == Some(REPORT_NAME))
            .map(|r| r.metadata.namespace.clone())
            .collect();
        // The cluster report always exists once the audit runs (empty when clean).
        clean.insert(None);
        for ns in clean {
            if !reports.contains_key(&ns) {
                let empty = report_object(ns.as_deref(), Vec::new(), 0);
                targets.push((ns, as_report_api(&empty, format)));
            }
        }
        for (ns, report) in &targets {
            let api: Api<DynamicObject> = match ns {
                Some(ns) => Api::namespaced_with(client.clone(), ns, &format.resource(false)),
                None => Api::all_with(client.clone(), &format.resource(true)),
            };
            api.patch(REPORT_NAME, &params, &Patch::Apply(report))
                .await?;
        }
        written += targets.len();
    }
    Ok(written)
}

/// One round: hold the Lease and, as the holder, audit and publish when `due`. Returns
/// whether this replica holds the Lease afterwards. While the audit runs the Lease is renewed
/// alongside it; if it is lost meanwhile, the round publishes nothing and returns false.
pub async fn round(
    client: &kube::Client,
    engine: &Engine,
    config: &BackgroundConfig,
    metrics: &AuditMetrics,
    due: bool,
) -> Result<bool, kube::Error> {
    let leader = hold_lease(client, config, Timestamp::now()).await?;
    metrics.leader.set(i64::from(leader));
    if !leader || !due {
        return Ok(leader);
    }
    tokio::select! {
        published = audit_and_publish(client, engine, config, metrics) => published.map(|()| true),
        () = keep_lease(client, config) => {
            metrics.leader.set(0);
            tracing::warn!(
                lease = %config.lease_name,
                "the audit Lease was lost during the audit: this round publishes nothing"
            );
            Ok(false)
        }
    }
}

async fn audit_and_publish(
    client: &kube::Client,
    engine: &Engine,
    config: &BackgroundConfig,
    metrics: &AuditMetrics,
) -> Result<(), kube::Error> {
    let started = Instant::now();
    let options = AuditOptions {
        page_size: config.page_size,
        limits: config.limits,
        max_evaluation_memory: config.max_evaluation_memory,
        exceptions: config.exceptions.clone(),
        ..AuditOptions::default()
    };
    let audited = audit(client, engine, &options, &mut |_: &str, _: usize| {}).await;
    let now = Timestamp::now();
    let reports = policy_reports(&audited.report, &audited.tally, config.max_results, now);
    let formats = report_formats(client, config.report_api).await;
    let written = publish(client, &reports, &formats).await?;
    let report_apis = if formats.is_empty() {
        "none served (install the PolicyReport CRDs: the chart's audit.installCRDs); results \
         are in the metrics only"
            .to_owned()
    } else {
        formats
            .iter()
            .map(|f| f.api_version())
            .collect::<Vec<_>>()
            .join(", ")
    };
    metrics.record(&audited, started.elapsed(), now);
    let counts = audited.report.counts();
    let not_served = audited.report.files.iter().filter(|f| f.not_served).count();
    tracing::info!(
        objects = counts.objects,
        errors = counts.errors,
        warnings = counts.warnings,
        unreadable = counts.problems,
        kinds_not_served = not_served,
        report_apis,
        reports = written,
        requests = audited.requests,
        seconds = started.elapsed().as_secs_f64(),
        "background audit published"
    );
    Ok(())
}

/// How often the holder renews the Lease: a third of its duration, so two renewals can fail
/// before it runs out.
fn renew_every(config: &BackgroundConfig) -> Duration {
    (config.lease_duration / 3).max(Duration::from_secs(1))
}

/// Renews the Lease every [`renew_every`] and returns once it is lost: another replica holds
/// it, or no renewal succeeded for a whole Lease duration (it may have expired).
async fn keep_lease(client: &kube::Client, config: &BackgroundConfig) {
    let mut renewed = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(renew_every(config)).await;
        match hold_lease(client, config, Timestamp::now()).await {
            Ok(true) => renewed = tokio::time::Instant::now(),
            Ok(false) => return,
            Err(error) => {
                tracing::warn!(%error, "cannot renew the audit Lease during the audit");
                if renewed.elapsed() >= config.lease_duration {
                    return;
                }
            }
        }
    }
}

/// The HTTP status of a list or watch error, when the API server answered with one.
fn status_code(error: &watcher::Error) -> Option<u16> {
    let api = |e: &kube::Error| match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    };
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api(e),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    }
}

/// The metadata-only API and watch settings of `target`, on the first of its versions the
/// cluster serves; None (logged once per outage via `quiet`) when none is served or this
/// replica may not read it.
async fn watchable(
    client: &kube::Client,
    target: &Target,
    page_size: u32,
    quiet: &mut bool,
) -> Option<(Api<PartialObjectMeta<DynamicObject>>, watcher::Config)> {
    let mut settings = watcher::Config::default().page_size(page_size);
    match &target.selection {
        Selection::All => {}
        Selection::Labelled(label) => settings = settings.labels(label),
        Selection::Field(field) => settings = settings.fields(field),
        Selection::Named { name, .. } => {
            settings = settings.fields(&format!("metadata.name={name}"));
        }
    }
    let mut why = String::new();
    let mut not_served = false;
    for ar in std::iter::once(&target.resource).chain(&target.fallbacks) {
        let api: Api<PartialObjectMeta<DynamicObject>> = match &target.selection {
            Selection::Named { namespace, .. } => {
                Api::namespaced_with(client.clone(), namespace, ar)
            }
            _ => Api::all_with(client.clone(), ar),
        };
        let mut probe = ListParams::default().limit(1);
        probe.label_selector.clone_from(&settings.label_selector);
        probe.field_selector.clone_from(&settings.field_selector);
        match api.list(&probe).await {
            Ok(_) => return Some((api, settings)),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                not_served = true;
                why = format!(
                    "{} is not served (404: the CRD is not installed)",
                    resource_label(ar)
                );
            }
            Err(error) => {
                not_served = false;
                why = format!("cannot list {}: {error}", resource_label(ar));
                break;
            }
        }
    }
    // A kind the cluster does not serve is the common case on a plain cluster (most covered
    // kinds are CRDs of one delivery tool or another): one line per kind at debug, and the
    // round's summary counts them. Anything else (forbidden, unreachable) is a warning.
    if not_served {
        if !*quiet {
            tracing::debug!(
                kind = %target.resource.kind,
                covered_by = target.covered_by,
                "no change watch for this kind ({why}); the watch is tried again after a period"
            );
            *quiet = true;
        }
    } else if !*quiet {
        tracing::warn!(
            kind = %target.resource.kind,
            covered_by = target.covered_by,
            "no change watch for this kind ({why}); it is re-audited on the period only, and \
             the watch is tried again after a period"
        );
        *quiet = true;
    }
    None
}

/// Watches one covered kind for as long as the task lives and signals `changed` on every
/// change. Keeps no objects: each event is dropped once it has signalled.
async fn watch_target(
    client: kube::Client,
    target: Target,
    page_size: u32,
    retry: Duration,
    changed: Arc<Notify>,
) {
    let mut quiet = false;
    loop {
        let Some((api, settings)) = watchable(&client, &target, page_size, &mut quiet).await else {
            tokio::time::sleep(retry).await;
            continue;
        };
        quiet = false;
        let mut listed = false;
        let mut failing = false;
        let mut events = pin!(watcher(api, settings).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                    failing = false;
                    changed.notify_one();
                }
                // The first list is what the audit reads anyway; a later re-list (the watch
                // fell too far behind, 410 Gone) may hide changes, so it counts as one.
                Ok(watcher::Event::InitDone) => {
                    if listed {
                        changed.notify_one();
                    }
                    listed = true;
                    failing = false;
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Err(error) => {
                    let code = status_code(&error);
                    if !failing {
                        tracing::warn!(kind = %target.resource.kind, %error, "change watch failed; retrying with backoff");
                        failing = true;
                    }
                    // The CRD was removed or the permission revoked: probe again later
                    // instead of retrying the watch.
                    if matches!(code, Some(403 | 404)) {
                        break;
                    }
                }
            }
        }
        tokio::time::sleep(retry).await;
    }
}

/// Starts one change watch per kind [`super::targets`] lists for `engine`, with the same
/// selections the audit uses. Each task signals `changed` when an object changes; abort the
/// handles to stop them.
pub fn spawn_watches(
    client: &kube::Client,
    engine: &Engine,
    config: &BackgroundConfig,
    changed: &Arc<Notify>,
) -> Vec<JoinHandle<()>> {
    super::targets(engine)
        .into_iter()
        // Services are application objects that change all the time in a busy cluster; a
        // change-triggered audit of the whole cluster for each would re-audit it every debounce
        // interval. They are audited on the period only.
        .filter(|target| {
            !(target.resource.group.is_empty() && target.resource.plural == "services")
        })
        .map(|target| {
            tokio::spawn(watch_target(
                client.clone(),
                target,
                config.page_size,
                config.period,
                changed.clone(),
            ))
        })
        .collect()
}

fn stop(watches: &mut Vec<JoinHandle<()>>) {
    for w in watches.drain(..) {
        w.abort();
    }
}

/// Runs forever: renews or contests the Lease every third of its duration and, while
/// holding it, audits every `period` and [`BackgroundConfig::debounce`] after a change of a
/// covered object, with the current engine. The change watches run only while this replica
/// holds the Lease.
pub async fn run(
    client: kube::Client,
    config: BackgroundConfig,
    metrics: AuditMetrics,
    engine: impl Fn() -> Arc<Engine>,
) {
    use tokio::time::Instant;
    let tick = renew_every(&config);
    let changed = Arc::new(Notify::new());
    let mut watches: Vec<JoinHandle<()>> = Vec::new();
    let mut watched: Vec<Target> = Vec::new();
    let mut last_audit: Option<Instant> = None;
    // When the first change not yet audited was seen.
    let mut pending: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let since_audit = |d: Duration| last_audit.is_none_or(|t| now.duration_since(t) >= d);
        let change_due = pending.is_some_and(|t| now.duration_since(t) >= config.debounce)
            && since_audit(config.debounce);
        let due = since_audit(config.period) || change_due;
        let engine = engine();
        match round(&client, &engine, &config, &metrics, due).await {
            Ok(true) => {
                // (Re)start the watches on taking the Lease and when reloaded policies cover
                // other objects.
                let targets = super::targets(&engine);
                if watches.is_empty() || targets != watched {
                    stop(&mut watches);
                    watches = spawn_watches(&client, &engine, &config, &changed);
                    watched = targets;
                }
                if due {
                    last_audit = Some(Instant::now());
                    pending = None;
                }
            }
            // Another replica audits; audit at once when this one takes over.
            Ok(false) => {
                stop(&mut watches);
                last_audit = None;
                pending = None;
            }
            Err(error) => {
                // Retried at the next tick for the Lease, at the next period for the audit:
                // a persistent error (PolicyReport CRD absent, RBAC) must not hammer the API.
                if due {
                    last_audit = Some(Instant::now());
                    pending = None;
                }
                tracing::warn!(%error, "background audit round failed");
            }
        }
        // Sleep until the next Lease tick, or until a change's re-audit is due.
        let next_tick = Instant::now() + tick;
        loop {
            let wake = match (pending, last_audit) {
                (Some(first), Some(last)) => {
                    next_tick.min((first + config.debounce).max(last + config.debounce))
                }
                (Some(first), None) => next_tick.min(first + config.debounce),
                (None, _) => next_tick,
            };
            tokio::select! {
                () = tokio::time::sleep_until(wake) => break,
                () = changed.notified(), if !watches.is_empty() => {
                    pending.get_or_insert_with(Instant::now);
                }
            }
        }
    }
}
