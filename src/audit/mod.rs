//! `stackgate audit`: the engine and policies over the objects already in a cluster.
//!
//! The webhook only sees writes, so a cloud config stored before stackgate was installed is
//! never checked until someone writes it again. The audit lists every object a site or rule
//! covers ([`targets`]): the ConfigMaps and Secrets the `CloudConfigSites` document names (by
//! name, by its label, and by its values label: the CCM chart's values), the GitOps objects that carry the CCM chart's values (Flux
//! `HelmRelease`, Argo CD `Application`, RKE2/k3s `HelmChart` and `HelmChartConfig`), the
//! workloads that run the CCM (`DaemonSet`, `Deployment`) and the openstack-k8s-operators
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
//! object is evaluated and dropped, and only its findings are kept. A kind that cannot be
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
//! The report is `check`'s ([`crate::check::report`]): the same text, JSON, SARIF and JUnit
//! formats and exit codes, with `kind/namespace/name` in place of a file name.

pub mod background;
pub mod fix;
pub mod restart;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use json_patch::PatchOperation;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use crate::check::evaluate::{ObjectResult, Problem, verdict_items};
use crate::check::report::{self, Face, MaskMode};
use crate::check::{FailOn, FileReport, Format, Item, ItemKind, Level, Report};
use crate::engine::{Engine, Facts, Subject, Verdict};
use crate::releases::{Snapshot, VersionState};
use crate::rules::Operation;
use crate::rules::ovn_source_ranges::{self, LbSettings};
use crate::sites::{self, SiteKind};

/// Objects asked for per list request (`limit`): the most the audit holds at once.
pub const DEFAULT_PAGE_SIZE: u32 = 250;

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
    out.push(Target {
        fallbacks: vec![
            resource("helm.toolkit.fluxcd.io", "v2beta2", "HelmRelease"),
            resource("helm.toolkit.fluxcd.io", "v2beta1", "HelmRelease"),
        ],
        ..target(
            "helm.toolkit.fluxcd.io",
            "v2",
            "HelmRelease",
            "the CCM chart's values (sites)",
        )
    });
    out.push(target(
        "argoproj.io",
        "v1alpha1",
        "Application",
        "the CCM chart's values (sites)",
    ));
    out.push(target(
        "helm.cattle.io",
        "v1",
        "HelmChart",
        "the CCM chart's values (sites)",
    ));
    out.push(target(
        "helm.cattle.io",
        "v1",
        "HelmChartConfig",
        "the CCM chart's values (sites)",
    ));
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

    fn lists_services(&self) -> bool {
        self.resource.group.is_empty() && self.resource.kind == "Service"
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
    /// per kind that could not be listed.
    pub report: Report,
    /// The edits `--fix` would write (collected only when asked for).
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
        seen: BTreeSet::new(),
        requests: 0,
        objects: 0,
        cloud_configs: Vec::new(),
        collect_cloud_configs: false,
        facts: Facts::default(),
    };
    let engine = run.with_release_facts(engine, progress).await;
    for target in targets(&engine) {
        run.collect_cloud_configs = target.lists_cloud_config_sites();
        if target.lists_services() {
            run.facts = cloud_config_facts(std::mem::take(&mut run.cloud_configs));
        }
        run.list_target(&engine, &target, progress).await;
    }
    progress("CCM pods", run.objects);
    let workloads = std::mem::take(&mut run.workloads);
    let outcomes =
        restart::check_workloads(client, &engine, workloads.clone(), &mut run.requests).await;
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
                    None => run.files.push(FileReport {
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
        },
        fixes: run.fixes,
        restarts,
        workloads,
        engine,
        requests: run.requests,
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
        Format::Text => report::text_as(&audit.report, !options.no_diff, &AUDIT),
        Format::Json => report::json(&audit.report),
        Format::Sarif => report::sarif_as(&audit.report, engine.policies(), &AUDIT),
        Format::Junit => report::junit_as(&audit.report, &AUDIT),
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
    /// Entries already evaluated (a named site can also carry the label).
    seen: BTreeSet<String>,
    requests: usize,
    objects: usize,
    /// The load-balancer settings of the cloud configs listed so far.
    cloud_configs: Vec<LbSettings>,
    /// Whether the target being listed is one of the cluster's cloud-config sites.
    collect_cloud_configs: bool,
    /// The facts objects are evaluated with (the cloud config, once the sites are listed).
    facts: Facts,
}

/// The cloud-config fact of the cluster, reduced as `check` reduces its input: none found
/// leaves it unknown (the rule says it cannot see the config), disagreeing ones make it
/// unavailable, since the audit cannot tell which one the CCM reads.
fn cloud_config_facts(found: Vec<LbSettings>) -> Facts {
    match crate::check::facts::fact_of(
        found,
        "this cluster holds",
        "the audit cannot tell which one the CCM reads",
    ) {
        Some(fact) => Facts::of(ovn_source_ranges::FAMILY.id, fact),
        None => Facts::default(),
    }
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

impl Run<'_> {
    fn problem(&mut self, entry: String, message: String) {
        self.files.push(FileReport {
            problems: vec![Problem {
                line: 0,
                column: 0,
                message,
            }],
            ..FileReport::new(&entry)
        });
    }

    /// The engine with the cluster's `OpenStackVersion` objects as its release facts (as the
    /// webhook's watcher would have them). When they cannot be listed, the release-catalog
    /// kinds are audited against no OpenStackVersion and the report says so.
    async fn with_release_facts(&mut self, engine: &Engine, progress: Progress<'_>) -> Engine {
        let ar = crate::releases::watcher::api_resource();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ar);
        let mut snapshot = Snapshot::empty();
        let mut token: Option<String> = None;
        loop {
            progress(&ar.kind, self.objects);
            let mut params = ListParams::default().limit(self.options.page_size);
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            self.requests += 1;
            match api.list(&params).await {
                Ok(page) => {
                    for object in &page.items {
                        if let Ok((ns, name, state)) = VersionState::from_object(object) {
                            snapshot.insert(ns, name, state);
                        }
                    }
                    token = page.metadata.continue_.filter(|t| !t.is_empty());
                    if token.is_none() {
                        break;
                    }
                }
                Err(error) => {
                    if let Some(why) = list_error(&error) {
                        self.problem(
                            kind_label(&ar),
                            format!(
                                "cannot list OpenStackVersions: {why}. The release-annotation \
                                 rules were evaluated without them, so their findings rest on \
                                 facts this run cannot see"
                            ),
                        );
                    }
                    break;
                }
            }
        }
        engine.with_release_snapshot(Arc::new(snapshot))
    }

    /// Lists one target page by page and evaluates each object.
    async fn list_target(&mut self, engine: &Engine, target: &Target, progress: Progress<'_>) {
        if let Selection::Named { namespace, name } = &target.selection {
            return self.get_named(engine, target, namespace, name).await;
        }
        let mut tried = std::iter::once(&target.resource).chain(&target.fallbacks);
        let mut ar = tried.next().unwrap_or(&target.resource);
        let mut token: Option<String> = None;
        loop {
            progress(&ar.kind, self.objects);
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), ar);
            let mut params = ListParams::default().limit(self.options.page_size);
            match &target.selection {
                Selection::Labelled(label) => params = params.labels(label),
                Selection::Field(field) => params = params.fields(field),
                Selection::All | Selection::Named { .. } => {}
            }
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            self.requests += 1;
            let page = match api.list(&params).await {
                Ok(page) => page,
                Err(error) => {
                    match list_error(&error) {
                        // Not served: try the next version, else note it and go on.
                        None if token.is_none() => match tried.next() {
                            Some(next) => {
                                ar = next;
                                continue;
                            }
                            None => self.files.push(FileReport {
                                skipped: Some(format!(
                                    "not served by this cluster (404: the CRD is not \
                                     installed), so there is nothing of this kind to audit \
                                     (listed for {})",
                                    target.covered_by
                                )),
                                ..FileReport::new(&kind_label(&target.resource))
                            }),
                        },
                        why => self.problem(
                            kind_label(ar),
                            format!(
                                "cannot list {}: {}; its objects were not audited, so findings \
                                 on them are ones this run cannot see (listed for {})",
                                ar.plural,
                                why.unwrap_or_else(|| "404 Not Found while paging".to_owned()),
                                target.covered_by
                            ),
                        ),
                    }
                    return;
                }
            };
            let gvk = GroupVersionKind::gvk(&ar.group, &ar.version, &ar.kind);
            for mut object in page.items {
                // A list's items carry neither apiVersion nor kind on the wire.
                object.types = Some(kube::core::TypeMeta {
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                });
                self.evaluate(engine, ar, &gvk, object);
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return;
            }
        }
    }

    async fn get_named(&mut self, engine: &Engine, target: &Target, namespace: &str, name: &str) {
        let ar = &target.resource;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), namespace, ar);
        self.requests += 1;
        match api.get(name).await {
            Ok(mut object) => {
                object.types = Some(kube::core::TypeMeta {
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                });
                let gvk = GroupVersionKind::gvk(&ar.group, &ar.version, &ar.kind);
                self.evaluate(engine, ar, &gvk, object);
            }
            Err(error) => {
                if let Some(why) = list_error(&error) {
                    self.problem(
                        format!("{}/{namespace}/{name}", ar.kind),
                        format!(
                            "cannot read it: {why}; it was not audited, so findings on it are \
                             ones this run cannot see ({})",
                            target.covered_by
                        ),
                    );
                }
                // 404: the site is not used in this cluster; nothing to report.
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
        let entry = entry_name(&ar.kind, &object);
        if !self.seen.insert(entry.clone()) {
            return;
        }
        self.objects += 1;
        if gvk.group == "apps"
            && let Some(workload) = restart::Workload::of(engine, gvk, &object)
        {
            self.workloads.push(workload);
        }
        if self.collect_cloud_configs {
            self.cloud_configs
                .extend(crate::check::facts::settings_of(gvk, &object, None, engine));
        }
        let (result, diff) = evaluate_update_with(engine, ar, gvk, &object, &self.facts);
        if self.options.fix && !result.verdict.patch.is_empty() {
            self.fixes.push(PendingFix {
                resource: ar.clone(),
                entry: entry.clone(),
                namespace: object.metadata.namespace.clone(),
                name: object.metadata.name.clone().unwrap_or_default(),
                resource_version: object.metadata.resource_version.clone().unwrap_or_default(),
                patch: result.verdict.patch.clone(),
            });
        }
        self.files.push(FileReport {
            objects: vec![result],
            diff,
            ..FileReport::new(&entry)
        });
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
            fixed_by_patch: false,
            file: None,
        };
        match self.files.iter_mut().find(|f| f.name == stale.entry) {
            Some(file) => match file.objects.first_mut() {
                Some(object) => object.items.push(item),
                None => file.objects.push(bare_result(&stale.entry, vec![item])),
            },
            None => self.files.push(FileReport {
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
    let subject = Subject {
        operation: Operation::Update,
        kind: gvk,
        namespace: object.metadata.namespace.as_deref(),
        name: object.metadata.name.as_deref().unwrap_or(""),
        subresource: None,
        object: Some(object),
        old_object: Some(object),
        dry_run: true,
    };
    let verdict = engine.evaluate_with(&subject, facts);
    object_result(engine, ar, gvk, object, verdict)
}

/// The report entry of one evaluated object, and the masked diff of its fix.
fn object_result(
    engine: &Engine,
    ar: &ApiResource,
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    verdict: Verdict,
) -> (ObjectResult, Option<String>) {
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
            object: sites::helm::object_name(gvk, object),
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
    let after = serde_json::to_value(object).ok().and_then(|mut v| {
        json_patch::patch(&mut v, patch).ok()?;
        serde_json::from_value::<DynamicObject>(v).ok()
    });
    if let Some(after) = after {
        let sites = &engine.policies().sites;
        let found_after = sites::find(gvk, &after, sites);
        for site in sites::find(gvk, object, sites) {
            let Some(new) = found_after.iter().find(|s| s.pointer() == site.pointer()) else {
                continue;
            };
            let (Ok(old_text), Ok(new_text)) = (&site.text, &new.text) else {
                continue;
            };
            if old_text == new_text {
                continue;
            }
            covered.push(site.pointer());
            let label = format!("{} {}", site.object, site.location);
            let mode = if site.secret {
                MaskMode::SecretIni
            } else {
                MaskMode::File { secret_lines: &[] }
            };
            out.push_str(&report::masked_diff(old_text, new_text, &label, mode));
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
