//! `stackgate audit`: the engine and policies over the objects already in a cluster.
//!
//! The webhook only sees writes, so a cloud config stored before stackgate was installed is
//! never checked until someone writes it again. The audit lists every object a site or rule
//! covers ([`targets`]): the ConfigMaps and Secrets the `CloudConfigSites` document names (by
//! name, by its label, and by its values label: the CCM chart's values), every kind the
//! registry of delivery paths ([`crate::sites::delivery::REGISTRY`]) lists for the audit outside
//! the core group (the table in `docs/carriers.md`), the workloads that run the CCM (`DaemonSet`, `Deployment`) and the openstack-k8s-operators
//! service kinds the release catalog governs (with the `OpenStackVersion` objects listed
//! first, so the release rules see the same facts as the webhook's watcher), and, when the
//! `ovn-source-ranges` policy is on, the Services, last: they are evaluated with the
//! load-balancer settings of the cloud-config sites listed before them as the fact the
//! webhook reads from its cloud-config source (reduced as `check` does). Each object is
//! evaluated as an UPDATE of itself (`old_object` = `object`): the verdict is the one the
//! webhook would give if the object were written again unchanged, so ratcheting rules
//! (release annotations) treat stored values as stored.
//!
//! Listing is read-only and paged (`limit`/`continue`): one page is held at a time, each
//! object is evaluated and dropped, and only its findings are kept. What a run holds is
//! bounded by its caps, not by the cluster ([`page`]): a page is read as raw bytes up to
//! `--max-page-bytes` (a larger page is asked again with half the `limit`), an object over
//! `--max-object-bytes` is skipped with an input error that names it and its size, a kind is
//! stopped with an input error when the API server repeats a continue token or keeps paging
//! past `--max-list-pages` or a request (its whole answer included) takes longer than
//! `--request-timeout`, namespaces and names are cut to Kubernetes' limits where they are
//! read, the per-namespace tally names only the namespaces with the most findings
//! ([`tally`]), and the report lists at most `--max-report-objects` entries and
//! `--max-report-findings` findings ([`MAX_REPORT_TEXT_BYTES`] of text): the entries past
//! them are counted in the summary and the exit code, not listed. A kind that cannot be
//! listed is reported on its own and the run goes on: 404 (the CRD is not installed) is a
//! note, anything else (401/403 RBAC, 410 an expired continue token, a connection error)
//! is an input error (exit code 2), because the run then cannot see those objects.
//!
//! [`restart`] adds what the webhook cannot know: whether the running CCM pods started
//! before the cloud config they mount last changed. [`fix`] writes the webhook's edits back
//! through the API (`--fix`, with `--yes`).
//!
//! [`background`] is the same audit inside `stackgate serve`: one replica elected with a
//! Lease re-audits on a period and publishes PolicyReports.
//!
//! The report is the one `check` renders too ([`crate::report`]): the same text, JSON,
//! SARIF and JUnit formats and exit codes, with `kind/namespace/name` in place of a file
//! name.

pub mod background;
pub mod fix;
pub mod page;
pub mod restart;
pub mod tally;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use json_patch::PatchOperation;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use crate::engine::{Engine, Facts, Subject, Verdict};
use crate::facts::Collector;
use crate::facts::ccm_config::CcmConfigReads;
use crate::policy::exception::ExceptionRules;
use crate::releases::{Snapshot, VersionState};
use crate::report::mask::{self, MaskMode};
use crate::report::render::{self, Face};
use crate::report::{
    Counts, FailOn, FileReport, Format, Item, ItemKind, Level, ObjectResult, Problem, Report,
    verdict_items,
};
use crate::rules::Operation;
use crate::rules::ccm_workload::CcmMarkers;
use crate::rules::concurrency::ConcurrencyParams;
use crate::rules::ovn_source_ranges;
use crate::sites::{self, SiteKind};
use page::{ReadError, ReadLimits};
pub use tally::{NamespaceTally, Tally};

/// Objects asked for per list request (`limit`): the most the audit holds at once.
pub const DEFAULT_PAGE_SIZE: u32 = 250;

/// Default for [`AuditOptions::max_report_objects`]: entries the report lists one by one.
pub const DEFAULT_MAX_REPORT_OBJECTS: usize = 1_000;
/// Default for [`AuditOptions::max_report_findings`]: findings (and input errors) the report
/// lists; each object's own findings are capped by the engine
/// ([`crate::engine::MAX_FINDINGS_PER_LIST`] per list, then one "and N more").
pub const DEFAULT_MAX_REPORT_FINDINGS: usize = 2_000;
/// Message and diff bytes the report lists, at most (entries past it are counted only).
pub const MAX_REPORT_TEXT_BYTES: usize = 8 * 1024 * 1024;

/// The field manager of `--fix` writes.
pub const FIELD_MANAGER: &str = "stackgate-audit";

/// The rule name of the restart-awareness finding (not a policy: it compares two times the
/// webhook never sees).
pub const RESTART_RULE: &str = "ccm-restart-needed";

/// How the audit's reports name themselves.
pub const AUDIT: Face = Face {
    command: "stackgate audit",
    entry: ("entry", "entries"),
    fix_hint: "stackgate audit --fix --yes writes it through the API",
    input_error: "The kind could not be listed or the object could not be read from the \
                  cluster (RBAC, connection, an expired list); its objects were not audited.",
    own_rules: &[(
        RESTART_RULE,
        "A CCM pod started before the cloud config it mounts last changed. The OpenStack CCM \
         reads its cloud config only at start (cloud-provider-openstack openstack.go, \
         ReadConfig from the cloud-provider factory), so the running pod still uses the old \
         config until it restarts.",
    )],
    lines: false,
};

/// What `stackgate audit` does and how it reports; the `audit` flags fill it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditOptions {
    /// Output format.
    pub format: Format,
    /// Which findings make the exit code 1.
    pub fail_on: FailOn,
    /// Objects per list request.
    pub page_size: u32,
    /// Leave the fix diffs out of text output.
    pub no_diff: bool,
    /// Apply the webhook's edits through the API (`--fix`); a preview unless `yes`.
    pub fix: bool,
    /// With `fix`: write (`--yes`). Without it, `--fix` only previews.
    pub yes: bool,
    /// The caps of the audit's reads (page and object bytes, list requests per kind).
    pub limits: ReadLimits,
    /// Entries the report lists; past it (or [`Self::max_report_findings`], or
    /// [`MAX_REPORT_TEXT_BYTES`]) entries are counted in the summary, not listed.
    pub max_report_objects: usize,
    /// Findings and input errors the report lists.
    pub max_report_findings: usize,
    /// Bytes of memory the evaluation of one object may hold (the counting allocator's
    /// account, as the webhook's `--max-evaluation-memory`): past it the object is skipped
    /// with an input error.
    pub max_evaluation_memory: usize,
    /// Text output: one line for each kind the cluster does not serve, instead of one line
    /// for all of them.
    pub verbose: bool,
    /// Read the cluster's `StackgateException` objects in these rules' namespaces and apply
    /// them (None: none are read, e.g. the background audit of a release without the CRD).
    pub exceptions: Option<ExceptionRules>,
    /// The instant exceptions are judged at (None: the system clock when the audit starts).
    pub now: Option<Timestamp>,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self {
            format: Format::Text,
            fail_on: FailOn::Error,
            page_size: DEFAULT_PAGE_SIZE,
            no_diff: false,
            fix: false,
            yes: false,
            limits: ReadLimits::default(),
            max_report_objects: DEFAULT_MAX_REPORT_OBJECTS,
            max_report_findings: DEFAULT_MAX_REPORT_FINDINGS,
            max_evaluation_memory: crate::budget::DEFAULT_MAX_EVALUATION_MEMORY,
            verbose: false,
            exceptions: None,
            now: None,
        }
    }
}

/// Why `stackgate audit` could not finish (exit code 2). A kind it cannot list is part of
/// the report instead.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The report could not be written to the output.
    #[error("cannot write the report: {0}")]
    Output(#[source] std::io::Error),
}

/// Which objects of a kind the audit reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every object, in every namespace.
    All,
    /// Objects with this label selector, in every namespace.
    Labelled(String),
    /// Objects with this field selector, in every namespace.
    Field(String),
    /// One object by name.
    Named {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// One kind (and selection) the audit lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The resource, tried first.
    pub resource: ApiResource,
    /// Other served versions of the same kind, tried in order when the cluster does not
    /// serve the first (404): Flux serves `HelmRelease` as v2 since 2.3, v2beta2 and v2beta1
    /// before.
    pub fallbacks: Vec<ApiResource>,
    /// Which objects.
    pub selection: Selection,
    /// Why it is audited, for the report of a kind that cannot be listed.
    pub covered_by: &'static str,
}

fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn target(group: &str, version: &str, kind: &str, covered_by: &'static str) -> Target {
    Target {
        resource: resource(group, version, kind),
        fallbacks: Vec::new(),
        selection: Selection::All,
        covered_by,
    }
}

/// Why the ConfigMaps and Secrets with the sites document's `valuesLabel` are audited.
const VALUES_LABEL_COVERED_BY: &str =
    "the CCM chart's values label (valuesLabel) of the CloudConfigSites policy";

/// Why the objects of the delivery-path registry's API groups are audited.
const DELIVERY_COVERED_BY: &str = "a delivery path of the CCM's cloud config (sites)";

/// One target per kind the registry of delivery paths ([`sites::delivery::REGISTRY`]) asks
/// the audit to list outside the core group (the ConfigMaps and Secrets are selected by the
/// `CloudConfigSites` document above), in registry order: adding a delivery path to the
/// registry adds it here. The path's other served versions are the fallbacks (Flux serves
/// `HelmRelease` as v2, v2beta2 and v2beta1), and the plural is the one the path's webhook
/// registration names (Azimuth's `Manifests` is `manifests`, not the `manifestses` an
/// English rule would give).
fn delivery_targets() -> Vec<Target> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for path in sites::delivery::REGISTRY {
        for audit in path.audit {
            let sites::delivery::Audit::Listed(group, version, kind) = *audit else {
                continue;
            };
            if group.is_empty() || !seen.insert((group, kind)) {
                continue;
            }
            let plural = registered_plural(path, group, kind);
            let resource_of = |version: &str| {
                let gvk = GroupVersionKind::gvk(group, version, kind);
                match plural {
                    Some(plural) => ApiResource::from_gvk_with_plural(&gvk, plural),
                    None => ApiResource::from_gvk(&gvk),
                }
            };
            out.push(Target {
                resource: resource_of(version),
                fallbacks: path
                    .versions
                    .iter()
                    .filter(|v| **v != version)
                    .map(|v| resource_of(v))
                    .collect(),
                selection: Selection::All,
                covered_by: DELIVERY_COVERED_BY,
            });
        }
    }
    out
}

/// The resource a delivery path's webhook registration names for `kind` of `group`: the
/// kind in lower case, plural (`s`, `es`) or as it is (`manifests`).
fn registered_plural(
    path: &sites::delivery::DeliveryPath,
    group: &str,
    kind: &str,
) -> Option<&'static str> {
    let lower = kind.to_ascii_lowercase();
    let registrations = path.webhook.ok()?;
    registrations
        .iter()
        .filter(|r| r.group == group)
        .flat_map(|r| r.resources.iter().copied())
        .find(|r| {
            r.strip_prefix(lower.as_str())
                .is_some_and(|rest| matches!(rest, "" | "s" | "es"))
        })
}

/// Every kind the policies cover, in the order the audit lists them.
pub fn targets(engine: &Engine) -> Vec<Target> {
    let policies = engine.policies();
    let mut out = Vec::new();
    for site in &policies.sites.sites {
        let kind = match site.kind {
            SiteKind::ConfigMap => "ConfigMap",
            SiteKind::Secret => "Secret",
        };
        out.push(Target {
            selection: Selection::Named {
                namespace: site.namespace.clone(),
                name: site.name.clone(),
            },
            ..target(
                "",
                "v1",
                kind,
                "a cloud-config site of the CloudConfigSites policy",
            )
        });
    }
    if let Some(label) = &policies.sites.label {
        for kind in ["ConfigMap", "Secret"] {
            out.push(Target {
                selection: Selection::Labelled(label.clone()),
                ..target(
                    "",
                    "v1",
                    kind,
                    "the cloud-config label of the CloudConfigSites policy",
                )
            });
        }
    }
    // ConfigMaps and Secrets labelled as holding the CCM chart's values (Flux valuesFrom
    // sources): a label selector lists them without reading other Secrets.
    if let Some(label) = &policies.sites.values_label {
        for kind in ["ConfigMap", "Secret"] {
            out.push(Target {
                selection: Selection::Labelled(label.clone()),
                ..target("", "v1", kind, VALUES_LABEL_COVERED_BY)
            });
        }
    }
    // Cluster API ClusterResourceSet payloads: CAPI requires this Secret type for a payload
    // Secret, so a field selector finds them all without reading other Secrets.
    out.push(Target {
        selection: Selection::Field(format!("type={}", sites::payload::RESOURCE_SET_SECRET_TYPE)),
        ..target(
            "",
            "v1",
            "Secret",
            "ClusterResourceSet payload Secrets (sites)",
        )
    });
    out.extend(delivery_targets());
    out.push(target(
        "apps",
        "v1",
        "DaemonSet",
        "CCM workloads (ccm-concurrency, restart awareness)",
    ));
    out.push(target(
        "apps",
        "v1",
        "Deployment",
        "CCM workloads (ccm-concurrency, restart awareness)",
    ));
    let mut seen = BTreeSet::new();
    for mapping in &policies.releases.mappings {
        let t = &mapping.target;
        if seen.insert((t.group.clone(), t.version.clone(), t.kind.clone())) {
            out.push(target(
                &t.group,
                &t.version,
                &t.kind,
                "the release catalog (release annotations)",
            ));
        }
    }
    // Listed after the cloud-config sites: their settings are the fact the rule reads.
    if policies
        .for_rule(ovn_source_ranges::FAMILY.id)
        .next()
        .is_some()
    {
        out.push(target(
            "",
            "v1",
            "Service",
            "LoadBalancer Services (ovn-source-ranges)",
        ));
    }
    out
}

impl Target {
    /// Whether this target lists CCM workloads (DaemonSets, Deployments): listed first, the
    /// `CcmConfigSource` fact is reduced from them.
    fn lists_ccm_workloads(&self) -> bool {
        self.resource.group == "apps"
            && matches!(self.resource.kind.as_str(), "DaemonSet" | "Deployment")
    }

    /// Whether this target lists the cluster's own cloud configs (the named and labelled
    /// ConfigMaps and Secrets of the `CloudConfigSites` policy), whose settings are the
    /// fact the `ovn-source-ranges` family reads. ClusterResourceSet payloads and chart
    /// values may configure other clusters, so they are not.
    fn lists_cloud_config_sites(&self) -> bool {
        self.resource.group.is_empty()
            && matches!(self.resource.kind.as_str(), "ConfigMap" | "Secret")
            && matches!(
                self.selection,
                Selection::Named { .. } | Selection::Labelled(_)
            )
            // Chart values, like a HelmRelease's, are one source of a release: not the
            // cluster's cloud config.
            && self.covered_by != VALUES_LABEL_COVERED_BY
    }
}

/// `kind/namespace/name` (`kind/name` for cluster-scoped objects): the audit's file name.
pub fn entry_name(kind: &str, object: &DynamicObject) -> String {
    let name = object.metadata.name.as_deref().unwrap_or("");
    match object
        .metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
    {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// `plural.group` of a resource, as `kubectl` names it.
pub(crate) fn resource_label(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// A kind as the report names it: `HelmRelease (helm.toolkit.fluxcd.io/v2)`.
fn kind_label(resource: &ApiResource) -> String {
    format!("{} ({})", resource.kind, resource.api_version)
}

/// An object with findings and the edit `--fix` would write.
#[derive(Debug, Clone)]
pub struct PendingFix {
    /// The resource of the object.
    pub resource: ApiResource,
    /// `kind/namespace/name`.
    pub entry: String,
    /// Namespace (None for cluster-scoped objects).
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// The resourceVersion the edit was computed from (the write's precondition).
    pub resource_version: String,
    /// The webhook's JSON Patch.
    pub patch: Vec<PatchOperation>,
}

/// What one audit run found.
#[derive(Debug, Clone)]
pub struct Audit {
    /// The report, in `check`'s shape: one entry per object (`kind/namespace/name`) and one
    /// per kind that could not be listed; entries past the report caps are counted in
    /// [`Report::omitted`], not listed.
    pub report: Report,
    /// The edits `--fix` would write (collected only when asked for, for listed entries).
    pub fixes: Vec<PendingFix>,
    /// CCM pods running an older cloud config than the current one.
    pub restarts: Vec<restart::StaleWorkload>,
    /// The workloads found running the CCM.
    pub workloads: Vec<restart::Workload>,
    /// The engine the objects were evaluated with (the policies plus the cluster's
    /// OpenStackVersions).
    pub engine: Engine,
    /// List and get requests made.
    pub requests: usize,
    /// `fail` (denial) and `warn` (warning) findings per namespace (None: cluster-scoped),
    /// over every object, listed or not: the true summary of each PolicyReport. Bounded:
    /// the namespaces with the most findings are named, the others only counted.
    pub tally: NamespaceTally,
    /// Denials and warnings per policy, over every object, listed or not.
    pub violations: BTreeMap<String, usize>,
    /// The caps this run reached, with how often.
    pub limits: BTreeMap<AuditLimit, usize>,
}

/// A cap of the audit that was reached (the `limit` label of `stackgate_input_limits_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AuditLimit {
    /// A list answer over [`page::ReadLimits::max_page_bytes`] (asked again smaller, or the
    /// object skipped).
    PageBytes,
    /// An object over [`page::ReadLimits::max_object_bytes`] (skipped, named).
    ObjectBytes,
    /// More than [`page::ReadLimits::max_list_pages`] list requests for one kind.
    ListPages,
    /// The same continue token twice for one kind.
    ContinueRepeated,
    /// A request (its whole answer included) over [`page::ReadLimits::request_timeout`].
    RequestTimeout,
    /// Entries past [`AuditOptions::max_report_objects`], [`AuditOptions::max_report_findings`]
    /// or [`MAX_REPORT_TEXT_BYTES`] (counted, not listed).
    ReportEntries,
    /// An object whose evaluation held more than [`AuditOptions::max_evaluation_memory`]
    /// (skipped, named): the webhook's per-review budget, with its label.
    EvaluationMemory,
}

impl AuditLimit {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditLimit::PageBytes => "audit_page_bytes",
            AuditLimit::ObjectBytes => "audit_object_bytes",
            AuditLimit::ListPages => "audit_list_pages",
            AuditLimit::ContinueRepeated => "audit_continue_repeated",
            AuditLimit::RequestTimeout => "audit_request_timeout",
            AuditLimit::ReportEntries => "audit_report_entries",
            AuditLimit::EvaluationMemory => "memory",
        }
    }
}

/// Progress of a run, for a terminal: the kind being listed and the objects seen so far.
pub type Progress<'a> = &'a mut (dyn FnMut(&str, usize) + Send);

/// Lists and evaluates everything [`targets`] covers, then checks the CCM workloads for
/// pods running an older cloud config. Never writes.
pub async fn audit(
    client: &kube::Client,
    engine: &Engine,
    options: &AuditOptions,
    progress: Progress<'_>,
) -> Audit {
    let mut run = Run {
        client,
        options,
        files: Vec::new(),
        fixes: Vec::new(),
        workloads: Vec::new(),
        done: Vec::new(),
        requests: 0,
        objects: 0,
        collector: None,
        ccm_reads: None,
        facts: Facts::default(),
        omitted: Counts::default(),
        kept_findings: 0,
        kept_bytes: 0,
        tally: NamespaceTally::default(),
        violations: BTreeMap::new(),
        limits: BTreeMap::new(),
    };
    let engine = run.with_release_facts(engine, progress).await;
    // The exceptions in force, judged at one instant for the whole run.
    let exception_facts = match &options.exceptions {
        Some(rules) => {
            let now = options.now.unwrap_or_else(Timestamp::now);
            run.read_exceptions(&engine, rules, now).await
        }
        None => Facts::default(),
    };
    run.facts = exception_facts.clone();
    // The fact pre-pass: the targets the facts are reduced from are listed first, whatever
    // order `targets` gives, and every other object is evaluated with the facts they make.
    let (workloads, feeding, rest) = fact_pre_pass(targets(&engine));
    // First the CCM workloads: what their containers read as `--cloud-config` makes those
    // objects sites (`CcmConfigSource`), whatever they are named.
    let params = engine.ccm_marker_params();
    run.ccm_reads = Some((CcmConfigReads::default(), params));
    for target in workloads {
        if run.list_target(&engine, &target, progress).await {
            run.done.push(target);
        }
    }
    let ccm_reads = run.ccm_reads.take().map(|(reads, _)| Arc::new(reads));
    let read_facts = || {
        ccm_reads
            .clone()
            .filter(|r| !r.is_empty())
            .map(Facts::of_ccm_reads)
            .unwrap_or_default()
    };
    run.facts = read_facts();
    run.facts.merge(exception_facts.clone());
    run.collector = Some(Collector::new(&engine.policies().needed_facts()));
    for target in feeding {
        if run.list_target(&engine, &target, progress).await {
            run.done.push(target);
        }
    }
    run.facts = run.collector.take().map(reduced_facts).unwrap_or_default();
    run.facts.merge(read_facts());
    run.facts.merge(exception_facts);
    // Then every object the CCM reads that no other target lists, read by name, once.
    let read_targets = ccm_reads.iter().flat_map(|reads| read_targets(reads));
    for target in rest.into_iter().chain(read_targets) {
        if run.list_target(&engine, &target, progress).await {
            run.done.push(target);
        }
    }
    progress("CCM pods", run.objects);
    let mut workloads = std::mem::take(&mut run.workloads);
    workloads.truncate(restart::MAX_WORKLOADS);
    let outcomes = restart::check_workloads(
        client,
        &engine,
        workloads.clone(),
        &options.limits,
        &mut run.requests,
    )
    .await;
    let mut restarts = Vec::new();
    for outcome in outcomes {
        match outcome {
            restart::Outcome::Stale(stale) => {
                run.add_restart(&stale);
                restarts.push(stale);
            }
            restart::Outcome::Unseen { entry, message } => {
                let problem = Problem {
                    line: 0,
                    column: 0,
                    message,
                };
                match run.files.iter_mut().find(|f| f.name == entry) {
                    Some(file) => file.problems.push(problem),
                    None => run.push(FileReport {
                        problems: vec![problem],
                        ..FileReport::new(&entry)
                    }),
                }
            }
        }
    }
    Audit {
        report: Report {
            files: run.files,
            fail_on: options.fail_on,
            fix: false,
            omitted: run.omitted,
        },
        fixes: run.fixes,
        restarts,
        workloads,
        engine,
        requests: run.requests,
        tally: run.tally,
        violations: run.violations,
        limits: run.limits,
    }
}

/// Runs `stackgate audit`: audits, prints the report to `out` and, with `--fix`, previews or
/// writes the edits (then prints what was written and the restart commands to `out` too).
/// Returns the exit code (0, 1 or 2).
pub async fn run(
    client: &kube::Client,
    engine: &Engine,
    options: &AuditOptions,
    out: &mut dyn std::io::Write,
    progress: Progress<'_>,
) -> Result<u8, AuditError> {
    let mut audit = audit(client, engine, options, progress).await;
    let mut code = audit.report.exit_code();
    let mut after = String::new();
    if options.fix {
        let outcomes = fix::apply(client, &audit.fixes, options.yes).await;
        for (outcome, pending) in outcomes.iter().zip(&audit.fixes) {
            let fix::FixResult::Written(object) = &outcome.result else {
                continue;
            };
            // The report then describes the objects as written, as `check --fix` does.
            let Some(file) = audit
                .report
                .files
                .iter_mut()
                .find(|f| f.name == pending.entry)
            else {
                continue;
            };
            let ar = &pending.resource;
            let gvk = GroupVersionKind::gvk(&ar.group, &ar.version, &ar.kind);
            let (result, _) = evaluate_update(&audit.engine, ar, &gvk, object);
            file.objects = vec![result];
            file.written = true;
        }
        audit.report.fix = options.yes;
        code = audit.report.exit_code();
        after = fix::summary(&outcomes, &audit.restarts, &audit.workloads, options.yes);
        if outcomes
            .iter()
            .any(|o| matches!(o.result, fix::FixResult::Failed(_)))
        {
            code = 2;
        }
    }
    let rendered = match options.format {
        Format::Text => render::text_as(&audit.report, !options.no_diff, &AUDIT, options.verbose),
        Format::Json => render::json(&audit.report),
        Format::Sarif => render::sarif_as(&audit.report, engine.policies(), &AUDIT),
        Format::Junit => render::junit_as(&audit.report, &AUDIT),
    };
    out.write_all(rendered.as_bytes())
        .map_err(AuditError::Output)?;
    // The fix summary is for people; machine formats keep their one document on stdout.
    if options.format == Format::Text {
        out.write_all(after.as_bytes())
            .map_err(AuditError::Output)?;
    }
    out.flush().map_err(AuditError::Output)?;
    Ok(code)
}

/// The state of one run.
struct Run<'a> {
    client: &'a kube::Client,
    options: &'a AuditOptions,
    files: Vec<FileReport>,
    fixes: Vec<PendingFix>,
    workloads: Vec<restart::Workload>,
    /// Targets listed completely so far: an object one of them selects was evaluated already
    /// (a named site can also carry the label). Kept as selections, not as the names seen, so
    /// a run's memory does not grow with the number of objects.
    done: Vec<Target>,
    requests: usize,
    objects: usize,
    /// The facts being reduced, during the fact pre-pass (the cluster's cloud-config sites).
    collector: Option<Collector>,
    /// The `CcmConfigSource` fact being reduced, during the workload pre-pass, and the
    /// policy set's CCM recognition.
    ccm_reads: Option<(CcmConfigReads, ConcurrencyParams)>,
    /// The facts objects are evaluated with (the cloud config, once the sites are listed).
    facts: Facts,
    /// Entries past the report caps: counted, not listed.
    omitted: Counts,
    /// Findings and problems of the listed entries.
    kept_findings: usize,
    /// Message and diff bytes of the listed entries.
    kept_bytes: usize,
    tally: NamespaceTally,
    violations: BTreeMap<String, usize>,
    limits: BTreeMap<AuditLimit, usize>,
}

/// The bytes an entry adds to the report, as counted against [`MAX_REPORT_TEXT_BYTES`]: its
/// messages, diff and skip reason, and its names, which every format repeats on each line
/// of the entry (the entry name and the object's name once for the entry, then once per
/// finding and per input error).
fn listed_bytes(file: &FileReport) -> usize {
    let items = file.objects.iter().map(|o| o.items.len()).sum::<usize>();
    let object_names = file
        .objects
        .iter()
        .map(|o| o.object.len())
        .max()
        .unwrap_or(0);
    let names = (file.name.len() + object_names) * (1 + items + file.problems.len());
    names
        + file.problems.iter().map(|p| p.message.len()).sum::<usize>()
        + file
            .objects
            .iter()
            .flat_map(|o| &o.items)
            .map(|i| i.message.len())
            .sum::<usize>()
        + file.diff.as_ref().map_or(0, String::len)
        + file.skipped.as_ref().map_or(0, String::len)
}

/// The targets split for the fact pre-pass: the CCM workloads (the `CcmConfigSource` fact),
/// those the cloud-config fact is reduced from (the cluster's own cloud-config sites), then
/// every other one, each in its order.
fn fact_pre_pass(targets: Vec<Target>) -> (Vec<Target>, Vec<Target>, Vec<Target>) {
    let (workloads, others): (Vec<Target>, Vec<Target>) =
        targets.into_iter().partition(Target::lists_ccm_workloads);
    let (sites, rest) = others
        .into_iter()
        .partition(Target::lists_cloud_config_sites);
    (workloads, sites, rest)
}

/// Why an object the CCM reads is audited.
const CCM_READS_COVERED_BY: &str = "the --cloud-config a CCM workload reads (CcmConfigSource)";

/// One target per object CCM containers read, by name, in the fact's order.
fn read_targets(reads: &CcmConfigReads) -> Vec<Target> {
    let mut seen = BTreeSet::new();
    reads
        .reads()
        .filter(|read| {
            seen.insert((
                read.object.kind.as_str(),
                read.object.namespace.as_str(),
                read.object.name.as_str(),
            ))
        })
        .map(|read| Target {
            selection: Selection::Named {
                namespace: read.object.namespace.clone(),
                name: read.object.name.clone(),
            },
            ..target("", "v1", read.object.kind.as_str(), CCM_READS_COVERED_BY)
        })
        .collect()
}

/// The facts of the cluster, reduced as `check` reduces its input: e.g. no cloud config found
/// leaves that fact unknown (the rule says it cannot see the config), disagreeing ones make it
/// unavailable, since the audit cannot tell which one the CCM reads.
fn reduced_facts(collector: Collector) -> Facts {
    Facts::of_reduced(collector.reduced(
        "this cluster holds",
        "the audit cannot tell which one the CCM reads",
    ))
}

/// Why a list or get failed, for the report; `None` for 404 (not served or not there).
fn list_error(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status) if status.code == 404 => None,
        kube::Error::Api(status) => Some(match status.code {
            401 => "401 Unauthorized: the credentials were refused".to_owned(),
            403 => "403 Forbidden: this account has no RBAC permission to list it".to_owned(),
            410 => "410 Gone: the list changed faster than it could be paged (the continue \
                    token expired); run the audit again"
                .to_owned(),
            code => format!("{code} {}", status.reason),
        }),
        other => Some(other.to_string()),
    }
}

/// How listing one kind ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// Every page was read.
    Complete,
    /// The cluster does not serve the kind (404 on the first page).
    NotServed,
    /// Stopped part-way (an error, a cap); the report says why.
    Stopped,
}

/// The list parameters of one page of `selection`.
fn list_params(selection: &Selection, limit: u32, token: Option<&str>) -> ListParams {
    let mut params = ListParams::default().limit(limit);
    match selection {
        Selection::Labelled(label) => params = params.labels(label),
        Selection::Field(field) => params = params.fields(field),
        Selection::All | Selection::Named { .. } => {}
    }
    if let Some(t) = token {
        params = params.continue_token(t);
    }
    params
}

/// A byte count as people read it: `52428800 bytes (50.0 MiB)`.
fn bytes(n: usize) -> String {
    if n >= 1024 * 1024 {
        format!("{n} bytes ({:.1} MiB)", n as f64 / (1024.0 * 1024.0))
    } else {
        format!("{n} bytes")
    }
}

/// `kind/namespace/name` of an object known only by its names.
fn entry_of(kind: &str, namespace: Option<&str>, name: Option<&str>) -> String {
    let name = name.unwrap_or("(no name)");
    match namespace.filter(|n| !n.is_empty()) {
        Some(ns) => format!("{kind}/{ns}/{name}"),
        None => format!("{kind}/{name}"),
    }
}

/// The namespace of an entry name (`kind/namespace/name`; None for `kind/name`).
fn namespace_of_entry(entry: &str) -> Option<String> {
    let parts: Vec<&str> = entry.splitn(3, '/').collect();
    match parts.as_slice() {
        [_, ns, _] => Some((*ns).to_owned()),
        _ => None,
    }
}

impl Target {
    /// Whether this target's selection picks `object` (of resource `ar`): an object a
    /// target listed before picks was evaluated already. A selector this cannot read
    /// answers false (the object is then evaluated again: a repeated entry, never a lost one).
    fn selects(&self, ar: &ApiResource, object: &DynamicObject) -> bool {
        if self.resource.group != ar.group || self.resource.kind != ar.kind {
            return false;
        }
        let meta = &object.metadata;
        match &self.selection {
            Selection::All => true,
            Selection::Named { namespace, name } => {
                meta.namespace.as_deref() == Some(namespace.as_str())
                    && meta.name.as_deref() == Some(name.as_str())
            }
            Selection::Labelled(selector) => selector.split(',').all(|term| {
                let labels = meta.labels.as_ref();
                let label = |k: &str| labels.and_then(|l| l.get(k.trim())).map(String::as_str);
                if let Some((k, v)) = term.split_once("!=") {
                    label(k) != Some(v.trim())
                } else if let Some((k, v)) = term.split_once('=') {
                    let v = v.trim_start_matches('=').trim();
                    !k.contains(['(', ' ']) && label(k) == Some(v)
                } else {
                    !term.trim().is_empty()
                        && !term.contains(['(', ' ', '!'])
                        && label(term).is_some()
                }
            }),
            Selection::Field(selector) => selector.split(',').all(|term| {
                let Some((field, value)) = term.split_once('=') else {
                    return false;
                };
                let value = value.trim_start_matches('=');
                match field {
                    "type" => object.data.get("type").and_then(Value::as_str) == Some(value),
                    "metadata.name" => meta.name.as_deref() == Some(value),
                    "metadata.namespace" => meta.namespace.as_deref() == Some(value),
                    _ => false,
                }
            }),
        }
    }
}

impl Run<'_> {
    /// Lists the `StackgateException` objects of each of `rules`' namespaces and parses them
    /// strictly (as `serve` does). The CRD not installed (404) means none; any other failure
    /// to list, and every object the parser refuses, is an input error of its own entry
    /// (`StackgateException/<ns>[/<name>]`, exit code 2): the audit's answer would otherwise
    /// differ from the webhook's without saying so.
    async fn read_exceptions(
        &mut self,
        engine: &Engine,
        rules: &ExceptionRules,
        now: Timestamp,
    ) -> Facts {
        let resource = crate::exceptions_watch::api_resource();
        let mut objects = crate::exceptions_watch::Objects::default();
        for namespace in &rules.namespaces {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), namespace, &resource);
            self.requests += 1;
            let params = ListParams::default().limit(
                u32::try_from(crate::policy::exception::MAX_EXCEPTIONS + 1).unwrap_or(u32::MAX),
            );
            match api.list(&params).await {
                Ok(list) => {
                    for object in &list.items {
                        if let Some(reason) = objects.apply(object, engine, rules, now) {
                            let name = object.metadata.name.as_deref().unwrap_or_default();
                            self.problem(
                                format!("StackgateException/{namespace}/{name}"),
                                format!("{reason}; it exempts nothing"),
                            );
                        }
                    }
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => self.problem(
                    format!("StackgateException/{namespace}"),
                    format!(
                        "cannot list StackgateExceptions: {error}; none from this namespace \
                         is applied"
                    ),
                ),
            }
        }
        let (set, _) = objects.set(rules);
        if set.exceptions.is_empty() {
            return Facts::default();
        }
        Facts::of_exceptions(Arc::new(Arc::new(set).at(now)))
    }

    /// Counts a denial or warning in its namespace's and its policy's totals (a finding an
    /// exception admitted is neither).
    fn count(&mut self, namespace: Option<&str>, item: &Item) {
        if item.level == Level::Note || item.kind == ItemKind::Excepted {
            return;
        }
        self.tally.add(namespace, item.level);
        *self.violations.entry(item.policy.clone()).or_default() += 1;
    }

    fn reached(&mut self, limit: AuditLimit) {
        *self.limits.entry(limit).or_default() += 1;
    }

    /// An input error about a whole kind: always listed (there is at most one per target,
    /// so these never make the report grow with the cluster).
    fn kind_problem(&mut self, entry: String, message: String) {
        self.files.push(FileReport {
            problems: vec![Problem {
                line: 0,
                column: 0,
                message,
            }],
            ..FileReport::new(&entry)
        });
    }

    fn problem(&mut self, entry: String, message: String) {
        self.push(FileReport {
            problems: vec![Problem {
                line: 0,
                column: 0,
                message,
            }],
            ..FileReport::new(&entry)
        });
    }

    /// Adds an entry to the report, or, past the report caps, only counts it: the summary
    /// and the exit code stay true, the listing stays bounded.
    fn push(&mut self, file: FileReport) {
        let ns = namespace_of_entry(&file.name);
        for item in file.objects.iter().flat_map(|o| &o.items) {
            self.count(ns.as_deref(), item);
        }
        let findings =
            file.problems.len() + file.objects.iter().map(|o| o.items.len()).sum::<usize>();
        let text = listed_bytes(&file);
        let fits = self.files.len() < self.options.max_report_objects
            && self.kept_findings + findings <= self.options.max_report_findings
            && self.kept_bytes + text <= MAX_REPORT_TEXT_BYTES;
        // Once one entry is folded, every later one is too: the listing is a prefix.
        if fits && self.omitted.files == 0 {
            self.kept_findings += findings;
            self.kept_bytes += text;
            self.files.push(file);
            return;
        }
        if self.omitted.files == 0 {
            self.reached(AuditLimit::ReportEntries);
        }
        let one = Report {
            files: vec![file],
            fail_on: self.options.fail_on,
            fix: false,
            omitted: Counts::default(),
        }
        .counts();
        self.omitted += one;
    }

    /// Reads one kind page by page within the caps of [`page::ReadLimits`] and hands each
    /// object to `sink`. A kind that cannot be read completely gets an input error that says
    /// why and `consequence`.
    async fn list_kind(
        &mut self,
        ar: &ApiResource,
        selection: &Selection,
        consequence: &str,
        progress: Progress<'_>,
        sink: &mut (dyn FnMut(&mut Self, DynamicObject) + Send),
    ) -> Listing {
        let limits = self.options.limits;
        let page_size = self.options.page_size.max(1);
        let label = kind_label(ar);
        let plural = ar.plural.clone();
        let mut limit = page_size;
        let mut token: Option<String> = None;
        // Continue tokens seen, by hash: a hostile token costs its bytes once.
        let mut tokens: HashSet<u64> = HashSet::new();
        let mut requests = 0usize;
        loop {
            progress(&ar.kind, self.objects);
            if requests >= limits.max_list_pages {
                self.reached(AuditLimit::ListPages);
                self.kind_problem(
                    label,
                    format!(
                        "stopped listing {plural} after {requests} list requests (the limit, \
                         --max-list-pages): the API server kept answering with another continue \
                         token; {consequence}"
                    ),
                );
                return Listing::Stopped;
            }
            requests += 1;
            self.requests += 1;
            let params = list_params(selection, limit, token.as_deref());
            let next = match page::list(self.client, ar, &params, &limits).await {
                Ok(page) => {
                    let raw = match page.parse() {
                        Ok(raw) => raw,
                        Err(error) => {
                            self.kind_problem(
                                label,
                                format!(
                                    "cannot read a list page of {plural}: {error}; {consequence}"
                                ),
                            );
                            return Listing::Stopped;
                        }
                    };
                    for item in &raw.items {
                        let size = item.get().len();
                        if size > limits.max_object_bytes {
                            self.reached(AuditLimit::ObjectBytes);
                            let (ns, name) = page::name_of(item);
                            self.problem(
                                entry_of(&ar.kind, ns.as_deref(), name.as_deref()),
                                format!(
                                    "not audited: the object is {}, over the audit's limit of {} \
                                     per object (--max-object-bytes); its content was not read",
                                    bytes(size),
                                    bytes(limits.max_object_bytes)
                                ),
                            );
                            continue;
                        }
                        match page::decode(item) {
                            Ok(mut object) => {
                                // A list's items carry neither apiVersion nor kind on the wire.
                                object.types = Some(kube::core::TypeMeta {
                                    api_version: ar.api_version.clone(),
                                    kind: ar.kind.clone(),
                                });
                                sink(self, object);
                            }
                            Err(error) => {
                                let (ns, name) = page::name_of(item);
                                self.problem(
                                    entry_of(&ar.kind, ns.as_deref(), name.as_deref()),
                                    format!("not audited: cannot read it as an object: {error}"),
                                );
                            }
                        }
                    }
                    // Grow back towards the page size after a page that had to be smaller.
                    limit = limit.saturating_mul(2).min(page_size);
                    raw.metadata.continue_token
                }
                Err(ReadError::TooLarge { .. }) if limit > 1 => {
                    self.reached(AuditLimit::PageBytes);
                    limit /= 2;
                    continue;
                }
                Err(ReadError::TooLarge { .. }) => {
                    // One object alone is over the page cap: name it from a metadata-only
                    // page and go on past it with that page's continue token.
                    self.reached(AuditLimit::PageBytes);
                    requests += 1;
                    self.requests += 1;
                    let named = page::list_metadata(self.client, ar, &params, &limits).await;
                    let parsed = named.as_ref().map_err(ToString::to_string).and_then(|p| {
                        p.parse().map_err(|e| e.to_string()).map(|raw| {
                            let first = raw.items.first().map(|i| page::name_of(i));
                            (first, raw.metadata.continue_token)
                        })
                    });
                    match parsed {
                        Ok((Some((ns, name)), next)) => {
                            self.reached(AuditLimit::ObjectBytes);
                            self.problem(
                                entry_of(&ar.kind, ns.as_deref(), name.as_deref()),
                                format!(
                                    "not audited: a list page of this object alone is over the \
                                     audit's limit of {} per page (--max-page-bytes); its \
                                     content was not read",
                                    bytes(limits.max_page_bytes)
                                ),
                            );
                            next
                        }
                        Ok((None, _)) | Err(_) => {
                            let why = parsed.err().unwrap_or_else(|| "no object in it".to_owned());
                            self.kind_problem(
                                label,
                                format!(
                                    "stopped listing {plural}: a page of one object is over the \
                                     audit's limit of {} per page (--max-page-bytes), and its \
                                     metadata could not name it ({why}); {consequence}",
                                    bytes(limits.max_page_bytes)
                                ),
                            );
                            return Listing::Stopped;
                        }
                    }
                }
                Err(ReadError::Api(error)) => {
                    return match list_error(&error) {
                        None if token.is_none() => Listing::NotServed,
                        why => {
                            self.kind_problem(
                                label,
                                format!(
                                    "cannot list {plural}: {}; {consequence}",
                                    why.unwrap_or_else(|| "404 Not Found while paging".to_owned())
                                ),
                            );
                            Listing::Stopped
                        }
                    };
                }
                Err(ReadError::TimedOut { after }) => {
                    self.reached(AuditLimit::RequestTimeout);
                    self.kind_problem(
                        label,
                        format!(
                            "stopped listing {plural}: list request {requests} got no complete \
                             answer within the audit's limit of {after:?} per request \
                             (--request-timeout); {consequence}"
                        ),
                    );
                    return Listing::Stopped;
                }
                Err(error @ ReadError::Decode(_)) => {
                    self.kind_problem(
                        label,
                        format!("cannot read a list page of {plural}: {error}; {consequence}"),
                    );
                    return Listing::Stopped;
                }
            };
            let Some(next) = next.filter(|t| !t.is_empty()) else {
                return Listing::Complete;
            };
            if !tokens.insert(page::token_hash(&next)) {
                self.reached(AuditLimit::ContinueRepeated);
                self.kind_problem(
                    label,
                    format!(
                        "stopped listing {plural} after {requests} list requests: the API server \
                         answered with a continue token it had already given (a paging loop); \
                         {consequence}"
                    ),
                );
                return Listing::Stopped;
            }
            token = Some(next);
        }
    }

    /// The engine with the cluster's `OpenStackVersion` objects as its release facts (as the
    /// webhook's watcher would have them). When they cannot be listed, the release-catalog
    /// kinds are audited against no OpenStackVersion and the report says so.
    async fn with_release_facts(&mut self, engine: &Engine, progress: Progress<'_>) -> Engine {
        let ar = crate::releases::watcher::api_resource();
        let mut snapshot = Snapshot::empty();
        self.list_kind(
            &ar,
            &Selection::All,
            "the release-annotation rules were evaluated without them, so their findings rest \
             on facts this run cannot see",
            progress,
            &mut |_, object| {
                if let Ok((ns, name, state)) = VersionState::from_object(&object) {
                    snapshot.insert(ns, name, state);
                }
            },
        )
        .await;
        engine.with_release_snapshot(Arc::new(snapshot))
    }

    /// Lists one target page by page and evaluates each object; true when it was read
    /// completely (its objects count as evaluated for the targets after it).
    async fn list_target(
        &mut self,
        engine: &Engine,
        target: &Target,
        progress: Progress<'_>,
    ) -> bool {
        if let Selection::Named { namespace, name } = &target.selection {
            return self.get_named(engine, target, namespace, name).await;
        }
        let consequence = format!(
            "its objects were not audited, so findings on them are ones this run cannot see \
             (listed for {})",
            target.covered_by
        );
        for ar in std::iter::once(&target.resource).chain(&target.fallbacks) {
            let gvk = GroupVersionKind::gvk(&ar.group, &ar.version, &ar.kind);
            let listing = self
                .list_kind(
                    ar,
                    &target.selection,
                    &consequence,
                    progress,
                    &mut |run, object| {
                        run.evaluate(engine, ar, &gvk, object);
                    },
                )
                .await;
            match listing {
                Listing::Complete => return true,
                Listing::Stopped => return false,
                // Not served: try the next version.
                Listing::NotServed => {}
            }
        }
        self.files.push(FileReport {
            skipped: Some(format!(
                "not served by this cluster (404: the CRD is not installed), so there is nothing \
                 of this kind to audit (listed for {})",
                target.covered_by
            )),
            not_served: true,
            ..FileReport::new(&kind_label(&target.resource))
        });
        true
    }

    async fn get_named(
        &mut self,
        engine: &Engine,
        target: &Target,
        namespace: &str,
        name: &str,
    ) -> bool {
        let ar = &target.resource;
        self.requests += 1;
        let limits = self.options.limits;
        let entry = entry_of(&ar.kind, Some(namespace), Some(name));
        match page::get(self.client, ar, Some(namespace), name, &limits).await {
            Ok(Some(mut object)) => {
                object.types = Some(kube::core::TypeMeta {
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                });
                let gvk = GroupVersionKind::gvk(&ar.group, &ar.version, &ar.kind);
                self.evaluate(engine, ar, &gvk, object);
                true
            }
            // 404: the site is not used in this cluster; nothing to report.
            Ok(None) => true,
            Err(ReadError::TooLarge { limit }) => {
                self.reached(AuditLimit::ObjectBytes);
                self.problem(
                    entry,
                    format!(
                        "not audited: the object is over the audit's limit of {} per object \
                         (--max-object-bytes); its content was not read ({})",
                        bytes(limit),
                        target.covered_by
                    ),
                );
                false
            }
            Err(ReadError::TimedOut { after }) => {
                self.reached(AuditLimit::RequestTimeout);
                self.problem(
                    entry,
                    format!(
                        "not audited: reading it took longer than the audit's limit of {after:?} \
                         per request (--request-timeout); it was not audited ({})",
                        target.covered_by
                    ),
                );
                false
            }
            Err(error) => {
                let why = match &error {
                    ReadError::Api(e) => list_error(e).unwrap_or_else(|| error.to_string()),
                    other => other.to_string(),
                };
                self.problem(
                    entry,
                    format!(
                        "cannot read it: {why}; it was not audited, so findings on it are ones \
                         this run cannot see ({})",
                        target.covered_by
                    ),
                );
                false
            }
        }
    }

    /// Evaluates one object as an UPDATE of itself and keeps its findings.
    fn evaluate(
        &mut self,
        engine: &Engine,
        ar: &ApiResource,
        gvk: &GroupVersionKind,
        object: DynamicObject,
    ) {
        if self.done.iter().any(|t| t.selects(ar, &object)) {
            return;
        }
        let entry = entry_name(&ar.kind, &object);
        self.objects += 1;
        if gvk.group == "apps"
            && let Some(workload) = restart::Workload::of(engine, gvk, &object)
        {
            if self.workloads.len() < restart::MAX_WORKLOADS {
                self.workloads.push(workload);
            } else if self.workloads.len() == restart::MAX_WORKLOADS {
                // Once: the restart check reads the pods and mounts of each workload.
                self.kind_problem(
                    "CCM workloads".to_owned(),
                    format!(
                        "more than {} workloads run the CCM: restart awareness checked the first \
                         {} only ({} and later were not checked)",
                        restart::MAX_WORKLOADS,
                        restart::MAX_WORKLOADS,
                        workload.entry
                    ),
                );
                self.workloads.push(workload);
            }
        }
        if let Some(collector) = &mut self.collector {
            collector.add(gvk, &object, None, &engine.policies().sites);
        }
        if let Some((reads, params)) = &mut self.ccm_reads {
            let markers = CcmMarkers::new(&params.ccm_images, &params.ccm_args);
            reads.add_workload(gvk, &object, &markers);
        }
        let evaluated = evaluate_update_bounded(
            engine,
            ar,
            gvk,
            &object,
            &self.facts,
            self.options.max_evaluation_memory,
        );
        let (result, diff) = match evaluated {
            Ok(evaluated) => evaluated,
            Err(exhausted) => {
                self.reached(AuditLimit::EvaluationMemory);
                self.problem(entry, format!("not evaluated: {exhausted}"));
                return;
            }
        };
        let listed_before = self.files.len();
        let patch = (self.options.fix && !result.verdict.patch.is_empty())
            .then(|| result.verdict.patch.clone());
        self.push(FileReport {
            objects: vec![result],
            diff,
            ..FileReport::new(&entry)
        });
        // `--fix` writes what the report lists: a folded entry is fixed by the next run.
        if let Some(patch) = patch
            && self.files.len() > listed_before
        {
            self.fixes.push(PendingFix {
                resource: ar.clone(),
                entry,
                namespace: object.metadata.namespace.clone(),
                name: object.metadata.name.clone().unwrap_or_default(),
                resource_version: object.metadata.resource_version.clone().unwrap_or_default(),
                patch,
            });
        }
    }

    /// Adds a stale CCM workload to its entry (or a new entry when the workload was not
    /// listed itself).
    fn add_restart(&mut self, stale: &restart::StaleWorkload) {
        let item = Item {
            level: Level::Warning,
            kind: ItemKind::Warning,
            policy: RESTART_RULE.to_owned(),
            rule: RESTART_RULE.to_owned(),
            code: None,
            line: 0,
            message: stale.message(),
            text: None,
            fixed_by_patch: false,
            file: None,
        };
        match self.files.iter_mut().find(|f| f.name == stale.entry) {
            Some(file) => {
                let ns = namespace_of_entry(&stale.entry);
                match file.objects.first_mut() {
                    Some(object) => object.items.push(item.clone()),
                    None => file
                        .objects
                        .push(bare_result(&stale.entry, vec![item.clone()])),
                }
                self.count(ns.as_deref(), &item);
            }
            None => self.push(FileReport {
                objects: vec![bare_result(&stale.entry, vec![item])],
                ..FileReport::new(&stale.entry)
            }),
        }
    }
}

fn bare_result(entry: &str, items: Vec<Item>) -> ObjectResult {
    ObjectResult {
        object: entry.to_owned(),
        line: 0,
        items,
        verdict: Verdict::default(),
        json: Value::Null,
        secret_diffs: Vec::new(),
        fixable_in_place: true,
    }
}

/// Evaluates `object` as an UPDATE of itself (what the webhook would say if it were written
/// again unchanged): its report entry and the masked diff of its fix.
pub fn evaluate_update(
    engine: &Engine,
    ar: &ApiResource,
    gvk: &GroupVersionKind,
    object: &DynamicObject,
) -> (ObjectResult, Option<String>) {
    evaluate_update_with(engine, ar, gvk, object, &Facts::default())
}

/// [`evaluate_update`] with the facts of the cluster (the cloud config of the
/// `ovn-source-ranges` family).
pub fn evaluate_update_with(
    engine: &Engine,
    ar: &ApiResource,
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    facts: &Facts,
) -> (ObjectResult, Option<String>) {
    let subject = update_of_itself(gvk, object);
    let verdict = engine.evaluate_with(&subject, facts);
    object_result(engine, ar, &subject, object, verdict)
}

/// `object` written again unchanged: an UPDATE whose old and new objects are the stored one.
fn update_of_itself<'o>(gvk: &'o GroupVersionKind, object: &'o DynamicObject) -> Subject<'o> {
    Subject {
        operation: Operation::Update,
        kind: gvk,
        namespace: object
            .metadata
            .namespace
            .as_deref()
            .map(crate::short_text::ShortText::name),
        name: crate::short_text::ShortText::name(object.metadata.name.as_deref().unwrap_or("")),
        subresource: None,
        object: Some(object),
        old_object: Some(object),
        dry_run: true,
        // A stored object was written by someone audit cannot see.
        requester: crate::engine::Requester::Unknown,
    }
}

/// [`evaluate_update_with`] inside a memory account of `limit` bytes (the webhook's
/// per-review budget, [`crate::budget::MemoryScope`]): an object whose evaluation holds more
/// is not evaluated ([`crate::budget::Exhausted::Memory`]). The account is on this thread and nothing awaits
/// inside it, so it counts this evaluation alone.
pub fn evaluate_update_bounded(
    engine: &Engine,
    ar: &ApiResource,
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    facts: &Facts,
    limit: usize,
) -> Result<(ObjectResult, Option<String>), crate::budget::Exhausted> {
    let _account = crate::budget::MemoryScope::enter(limit);
    let cancel = crate::budget::Cancel::new();
    let subject = update_of_itself(gvk, object);
    let verdict = engine.evaluate_within(&subject, facts, &cancel)?;
    let evaluated = object_result(engine, ar, &subject, object, verdict);
    cancel.check()?;
    Ok(evaluated)
}

/// The report entry of one evaluated object (`subject`'s), and the masked diff of its fix. The
/// entry names the object as its findings do ([`Subject::reference`]): a stored object's
/// names are within the bounds a reference cuts at, and audit reads no values files.
fn object_result(
    engine: &Engine,
    ar: &ApiResource,
    subject: &Subject<'_>,
    object: &DynamicObject,
    verdict: Verdict,
) -> (ObjectResult, Option<String>) {
    let gvk = subject.kind;
    let mut items = verdict_items(&verdict, |_| 0, 0, |_, _| {});
    items.sort_by_key(|i| std::cmp::Reverse(i.level));
    let diff = if verdict.patch.is_empty() {
        None
    } else {
        Some(fix_diff(engine, gvk, object, &verdict.patch))
    };
    // Only what a report reads of the object: the whole object is not kept past its page.
    let json = json!({"apiVersion": ar.api_version, "kind": ar.kind});
    (
        ObjectResult {
            object: subject.reference().to_string(),
            line: 0,
            items,
            verdict,
            json,
            secret_diffs: Vec::new(),
            fixable_in_place: true,
        },
        diff,
    )
}

/// The fix as people read it: a masked diff of each cloud config the patch changes (every
/// value masked when the config is kept in a Secret or rendered into one), and the patch's
/// other operations by path (values not shown).
fn fix_diff(
    engine: &Engine,
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    patch: &[PatchOperation],
) -> String {
    let mut out = String::new();
    let mut covered: Vec<String> = Vec::new();
    if let Ok(written) = serde_json::to_value(object) {
        let diffs = mask::site_diffs(
            gvk,
            object,
            &written,
            patch,
            engine,
            |site| format!("{} {}", site.object, site.location),
            |site| {
                if site.secret {
                    MaskMode::SecretIni
                } else {
                    MaskMode::File { secret_lines: &[] }
                }
            },
        );
        for (pointer, diff) in diffs {
            covered.push(pointer);
            out.push_str(&diff);
        }
    }
    for op in patch {
        let path = op.path().to_string();
        if covered.iter().any(|c| path.starts_with(c.as_str())) {
            continue;
        }
        let verb = match op {
            PatchOperation::Add(_) => "add",
            PatchOperation::Remove(_) => "remove",
            PatchOperation::Replace(_) => "replace",
            PatchOperation::Move(_) => "move",
            PatchOperation::Copy(_) => "copy",
            PatchOperation::Test(_) => "test",
        };
        let _ = writeln!(out, "  JSON Patch: {verb} {path} (value not shown)");
    }
    out
}

#[cfg(test)]
mod report_cap_tests {
    use super::*;

    /// The entry's names count against [`MAX_REPORT_TEXT_BYTES`] once per line that repeats
    /// them, not only its messages: 2,000 entries named with 4 KiB each would otherwise pass
    /// the cap unseen.
    #[test]
    fn an_entrys_names_count_once_per_line() {
        let name = format!("ConfigMap/{}/cm", "n".repeat(4096));
        let problem = |message: &str| Problem {
            line: 0,
            column: 0,
            message: message.to_owned(),
        };
        let file = FileReport {
            problems: vec![problem("one"), problem("two")],
            ..FileReport::new(&name)
        };
        // The header line and one line per input error, each with the name.
        assert_eq!(
            listed_bytes(&file),
            name.len() * 3 + "one".len() + "two".len()
        );
        let bare = FileReport::new(&name);
        assert_eq!(listed_bytes(&bare), name.len());
    }
}

#[cfg(test)]
mod fact_tests {
    use super::*;
    use crate::policy::PolicySet;

    /// Whatever order the targets come in, the cloud-config sites are listed before the
    /// Services judged by their settings, and nothing is lost or listed twice.
    #[test]
    fn the_fact_pre_pass_does_not_depend_on_listing_order() {
        let engine = Engine::new(PolicySet::embedded().expect("embedded policies"));
        let mut all = targets(&engine);
        all.reverse();
        let count = all.len();
        let (workloads, feeding, rest) = fact_pre_pass(all);
        assert_eq!(workloads.len(), 2, "DaemonSets and Deployments");
        assert!(workloads.iter().all(Target::lists_ccm_workloads));
        assert!(!feeding.is_empty());
        assert!(feeding.iter().all(Target::lists_cloud_config_sites));
        assert!(!rest.iter().any(Target::lists_cloud_config_sites));
        assert!(!rest.iter().any(Target::lists_ccm_workloads));
        assert!(rest.iter().any(|t| t.resource.kind == "Service"));
        assert_eq!(workloads.len() + feeding.len() + rest.len(), count);
    }
}
