//! The composition roots of the commands that reach the cluster: `stackgate serve` (the one
//! place that turns the `serve` flags into a running server) and `stackgate audit`.
//!
//! It creates at most one Kubernetes client (only when a component needs the cluster) and
//! hands it to the components that asked for it:
//!
//! A fact source or watcher starts only when an enabled policy needs its fact
//! ([`PolicySet::needed_facts`]); its flag alone does not start it.
//!
//! | component | flag | cluster access missing |
//! |---|---|---|
//! | load-balancer guard | `--lb-guard on` | start-up error |
//! | background audit | `--background-audit` | start-up error |
//! | cloud-config fact watcher | `--cloud-config-object` | start-up error |
//! | OpenShift platform fact watcher | `--openshift-platform auto` | warning, off |
//! | CCM config source fact watcher | `--ccm-config-source auto` | warning, off |
//! | release watcher | `--kube auto` | warning, off |
//!
//! Each component registers its metrics before the server state exists, adds its fact
//! source while the state is built, and then adds its readiness gate and spawns its task
//! into [`Tasks`], which the root stops when the server has drained: no task outlives
//! the server.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::admission::FactSource;
use crate::audit::background::{AuditMetrics, BackgroundConfig};
use crate::ccm_config_watch::{CcmConfigCell, CcmConfigSource, CcmWorkloads};
use crate::certs::controller::{RotationMetrics, SelfManagedConfig};
use crate::cli::{
    AuditArgs, CcmConfigSourceMode, ExceptionsArgs, ExceptionsCommand, KubeMode, ListFormat,
    OpenShiftPlatformMode, PoliciesArgs, ServeArgs, TlsArgsError, UninstallArgs,
};
use crate::cluster_config::{CloudConfigSource, ConfigFactCell, ConfigObject, ConfigObjectError};
use crate::engine::Engine;
use crate::exceptions_watch::{ExceptionCell, ExceptionMetrics, ExceptionSource};
use crate::fact_watcher::FactMetrics;
use crate::facts::platform::Infrastructure;
use crate::facts::{FactId, WatchedFact};
use crate::guard::{Guard, GuardSource};
use crate::metrics::Metrics;
use crate::platform::{PlatformCell, PlatformSource};
use crate::policy::PolicySet;
use crate::policy::exception::{ExceptionRules, ExceptionSet};
use crate::releases::watcher::WatchConfig;
use crate::server::{self, AppState, ServerConfig, ServerError, ServingCert, TlsSource};

/// How long the runtime may wait for its tasks (blocking evaluations included) after the
/// server has stopped.
const RUNTIME_SHUTDOWN_TIMEOUT: Duration = Duration::from_millis(200);

/// The log target of every line logged here: the binary's, which these lines had before
/// the composition root moved out of `main.rs` (log filters and JSON readers select by it).
const LOG_TARGET: &str = "stackgate";

/// How long stopping the background tasks may take once they are aborted: an abort takes
/// effect at the task's next await, which a task busy on a worker thread reaches late.
const TASK_STOP_TIMEOUT: Duration = Duration::from_millis(200);

/// Why `stackgate serve` could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    /// `--cloud-config-object` does not name an object.
    #[error("--cloud-config-object / STACKGATE_CLOUD_CONFIG_OBJECT")]
    CloudConfigObject(#[source] ConfigObjectError),
    /// A component asked for explicitly has no cluster access.
    #[error("{flag} needs cluster access (in-cluster service account or kubeconfig)")]
    ClusterAccess {
        /// The flag that asked for the component.
        flag: &'static str,
        /// Why the client could not be created.
        #[source]
        source: kube::Error,
    },
    /// The async runtime could not start.
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
    /// The server failed (binding, certificates).
    #[error("serving")]
    Serve(#[source] ServerError),
    /// `--tls-mode self-managed` settings that cannot work.
    #[error("self-managed TLS")]
    Tls(#[source] TlsArgsError),
}

/// The server's background tasks, each with a name; [`Tasks::stop`] ends them all.
#[derive(Debug, Default)]
pub struct Tasks {
    running: Vec<(&'static str, JoinHandle<()>)>,
}

impl Tasks {
    /// Takes ownership of a spawned task.
    pub fn add(&mut self, name: &'static str, task: JoinHandle<()>) {
        self.running.push((name, task));
    }

    /// Number of tasks owned.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    /// Whether no task is owned.
    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }

    /// Aborts every task and waits (at most 200 ms) until they are gone;
    /// a task that had panicked is logged.
    pub async fn stop(self) {
        for (_, task) in &self.running {
            task.abort();
        }
        let joined = async {
            for (name, task) in self.running {
                if let Err(error) = task.await
                    && error.is_panic()
                {
                    tracing::error!(target: LOG_TARGET, task = name, "background task panicked");
                }
            }
        };
        let _ = tokio::time::timeout(TASK_STOP_TIMEOUT, joined).await;
    }
}

/// `stackgate serve`: builds the components `args` ask for around `policies`, serves until
/// SIGTERM or Ctrl-C, drains, and stops every background task.
pub fn serve(args: ServeArgs, policies: PolicySet) -> Result<(), ComposeError> {
    tracing::info!(
        target: LOG_TARGET,
        origin = %policies.origin,
        policies = policies.policies.len(),
        sites = policies.sites.sites.len(),
        "policies loaded"
    );
    let mut metrics = Metrics::new();
    metrics.set_policies_loaded(policies.policies.len());
    // A fact is fed only when an enabled policy needs it (its family declares it, or the site
    // policy shares a site with other platforms), whatever the flags ask.
    let needed = policies.needed_facts();
    // Registration order is the order of /metrics; it is kept from before the root existed.
    let cloud_config = args
        .cloud_config()
        .map_err(ComposeError::CloudConfigObject)?
        .filter(|_| feeds(&needed, FactId::CloudConfig, "--cloud-config-object"))
        .map(FactWatcher::cloud_config);
    if let Some(component) = &cloud_config {
        component.metrics.register(metrics.registry_mut());
    }
    let platform = (args.openshift_platform == OpenShiftPlatformMode::Auto
        && feeds(&needed, FactId::Platform, "--openshift-platform auto"))
    .then(FactWatcher::platform);
    if let Some(component) = &platform {
        component.metrics.register(metrics.registry_mut());
    }
    let engine = Engine::new(policies);
    let exceptions = args.watch_exceptions.then(|| ExceptionWatcher {
        engine: engine.clone(),
        rules: args.exception_rules.rules(),
        cell: ExceptionCell::holding(ExceptionSet::default()),
        metrics: ExceptionMetrics::default(),
    });
    if let Some(component) = &exceptions {
        component.metrics.register(metrics.registry_mut());
    }
    let ccm_config = (args.ccm_config_source == CcmConfigSourceMode::Auto
        && feeds(&needed, FactId::CcmConfigSource, "--ccm-config-source auto"))
    .then(|| FactWatcher::ccm_config(&engine));
    if let Some(component) = &ccm_config {
        component.metrics.register(metrics.registry_mut());
    }
    let guard_config = args
        .guard
        .config()
        .filter(|_| feeds(&needed, FactId::ControlPlaneLoadBalancer, "--lb-guard on"));
    let background_audit = args
        .background_audit
        .config(std::env::var("HOSTNAME").ok())
        .map(|config| BackgroundConfig {
            // One object's evaluation gets the webhook's budget per review.
            max_evaluation_memory: args.max_evaluation_memory,
            // The reports say what the webhook does: the same exceptions, when it reads them.
            exceptions: args.watch_exceptions.then(|| args.exception_rules.rules()),
            ..config
        });
    let releases = ReleaseWatcher {
        mode: args.kube,
        resync: args.release_resync,
    };
    let config = ServerConfig::from(&args);
    let self_managed = match (
        &config.tls,
        args.tls
            .self_managed(std::env::var("HOSTNAME").ok(), args.tls_cert.is_some()),
    ) {
        (_, Err(error)) => return Err(ComposeError::Tls(error)),
        (TlsSource::SelfManaged(serving), Ok(Some(settings))) => {
            let component = SelfManagedTls {
                settings,
                serving: serving.clone(),
                metrics: RotationMetrics::default(),
            };
            Some(component)
        }
        _ => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(ComposeError::Runtime)?;
    let served = runtime.block_on(async move {
        // The first component that cannot run without the cluster names the flag to fix.
        let required_by = [
            (guard_config.is_some(), "--lb-guard on"),
            (background_audit.is_some(), "--background-audit"),
            (self_managed.is_some(), "--tls-mode self-managed"),
            (cloud_config.is_some(), "--cloud-config-object"),
            (exceptions.is_some(), "--watch-exceptions"),
        ]
        .into_iter()
        .find_map(|(wanted, flag)| wanted.then_some(flag));
        let wanted = required_by.is_some()
            || platform.is_some()
            || ccm_config.is_some()
            || releases.mode == KubeMode::Auto;
        let cluster = match wanted {
            false => None,
            true => match (kube::Client::try_default().await, required_by) {
                (Err(source), Some(flag)) => {
                    return Err(ComposeError::ClusterAccess { flag, source });
                }
                (cluster, _) => Some(cluster),
            },
        };
        let client = || match &cluster {
            Some(Ok(client)) => Some(client.clone()),
            _ => None,
        };
        let guard = guard_config.zip(client()).map(|(guard_config, client)| {
            let guard = Guard::new(client, guard_config);
            guard.metrics().register(metrics.registry_mut());
            tracing::info!(target: LOG_TARGET, "control-plane load-balancer guard on");
            Arc::new(guard)
        });
        let auditor = background_audit.zip(client()).map(|(config, client)| {
            let component = BackgroundAudit::new(config, client, &metrics);
            component.metrics.register(metrics.registry_mut());
            component
        });
        // After the audit's, as docs/metrics.md lists them.
        if let Some(component) = &self_managed {
            component.metrics.register(metrics.registry_mut());
        }
        let platform = platform.and_then(|component| match cluster.as_ref()? {
            Ok(client) => Some((component, client.clone())),
            Err(error) => {
                tracing::warn!(
                    target: LOG_TARGET,
                    %error,
                    "--openshift-platform auto without cluster access (in-cluster config or \
                     kubeconfig): cloud configs are judged by their content alone"
                );
                None
            }
        });
        let ccm_config = ccm_config.and_then(|component| match cluster.as_ref()? {
            Ok(client) => Some((component, client.clone())),
            Err(error) => {
                tracing::warn!(
                    target: LOG_TARGET,
                    %error,
                    "--ccm-config-source auto without cluster access (in-cluster config or \
                     kubeconfig): only the named and labelled cloud-config sites are checked"
                );
                None
            }
        });

        let mut state = AppState::new(engine, metrics);
        if let Some(guard) = guard {
            state = state.with_fact_source(Arc::new(GuardSource::new(guard)));
        }
        // Every source that wants a review contributes; the order is the merge order.
        if let Some(component) = &cloud_config {
            state = state.with_fact_source(Arc::clone(&component.source));
        }
        if let Some((component, _)) = &platform {
            state = state.with_fact_source(Arc::clone(&component.source));
        }
        if let Some((component, _)) = &ccm_config {
            state = state.with_fact_source(Arc::clone(&component.source));
        }
        if let Some(component) = &exceptions {
            state = state.with_fact_source(Arc::new(ExceptionSource::new(component.cell.clone())));
        }
        let state = Arc::new(state);

        let mut tasks = Tasks::default();
        if let Some((component, client)) = platform {
            component.start(client, &state, &mut tasks);
        }
        if let Some((component, client)) = ccm_config {
            component.start(client, &state, &mut tasks);
        }
        if let Some(component) = cloud_config {
            // Present only when a client exists: without one the start-up failed above.
            if let Some(client) = client() {
                component.start(client, &state, &mut tasks);
            }
        }
        if let Some(component) = exceptions {
            // Present only when a client exists: without one the start-up failed above.
            if let Some(client) = client() {
                component.start(client, &state, &mut tasks);
            }
        }
        releases.start(cluster.as_ref(), &state, &mut tasks);
        if let Some(component) = auditor {
            component.start(&state, &mut tasks);
        }
        if let Some(component) = self_managed {
            // Present only when a client exists: without one the start-up failed above.
            if let Some(client) = client() {
                component.start(client, &state, &mut tasks);
            }
        }

        let served = server::run(config, state, shutdown_signal()).await;
        tasks.stop().await;
        served.map_err(ComposeError::Serve)
    });
    // Dropping a runtime waits for every blocking task; an evaluation past its deadline may
    // still be running there (cancelled, but not yet at a check). The server has drained
    // and answered everything it will answer, so do not wait for it: the process must be
    // gone within --shutdown-grace (plus about a second) of the listener closing.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_TIMEOUT);
    served
}

/// Whether the fact source a flag asks for is started: only when `needed` (the facts the
/// enabled policies need) holds `fact`. Otherwise the flag is logged as having no effect.
fn feeds(needed: &[FactId], fact: FactId, flag: &str) -> bool {
    let feeds = needed.contains(&fact);
    if !feeds {
        tracing::info!(
            target: LOG_TARGET,
            fact = %fact,
            "{flag}: no enabled policy needs this fact, so it is not gathered"
        );
    }
    feeds
}

/// A watched fact (`--cloud-config-object`, `--openshift-platform auto`,
/// `--ccm-config-source auto`): the generic fact watcher ([`crate::fact_watcher`]) keeps the
/// cell its fact source reads current, and a readiness gate named after the fact
/// (`cloud-config`, `openshift-platform`, `ccm-config-source`) holds /readyz until the first
/// definite answer (a complete list, or a refusal: missing RBAC never wedges readiness).
struct FactWatcher<W: WatchedFact> {
    fact: W,
    store: Box<dyn Fn(W::Fact) + Send + Sync>,
    source: Arc<dyn FactSource>,
    metrics: FactMetrics<W>,
}

impl FactWatcher<ConfigObject> {
    fn cloud_config(object: ConfigObject) -> Self {
        let cell = ConfigFactCell::new(&object);
        Self {
            fact: object,
            source: Arc::new(CloudConfigSource::new(cell.clone())),
            store: Box::new(move |fact| cell.set(fact)),
            metrics: FactMetrics::default(),
        }
    }
}

impl FactWatcher<Infrastructure> {
    fn platform() -> Self {
        let cell = PlatformCell::default();
        Self {
            fact: Infrastructure,
            source: Arc::new(PlatformSource::new(cell.clone())),
            store: Box::new(move |fact| cell.set(fact)),
            metrics: FactMetrics::default(),
        }
    }
}

impl FactWatcher<CcmWorkloads> {
    /// Recognises CCM containers as the engine's policy set does; the engine's policies do
    /// not change while the server runs (only its release snapshot is swapped).
    fn ccm_config(engine: &Engine) -> Self {
        let params = engine.ccm_marker_params();
        let cell = CcmConfigCell::default();
        Self {
            fact: CcmWorkloads::new(params.ccm_images, params.ccm_args),
            source: Arc::new(CcmConfigSource::new(cell.clone())),
            store: Box::new(move |fact| cell.set(fact)),
            metrics: FactMetrics::default(),
        }
    }
}

impl<W: WatchedFact> FactWatcher<W> {
    fn start(self, client: kube::Client, state: &Arc<AppState>, tasks: &mut Tasks) {
        let gate = state.add_readiness_gate(W::ID.as_str());
        tracing::info!(
            target: LOG_TARGET,
            object = %self.fact.describe(),
            "{}: watching",
            W::LOG_LABEL
        );
        tasks.add(
            W::TASK,
            tokio::spawn(crate::fact_watcher::run(
                client,
                self.fact,
                self.store,
                self.metrics,
                move || gate.set(true),
            )),
        );
    }
}

/// The StackgateException watcher (`--watch-exceptions`): its cell feeds every review, its
/// readiness gate `exceptions` holds /readyz until the first list or refusal.
struct ExceptionWatcher {
    engine: Engine,
    rules: ExceptionRules,
    cell: ExceptionCell,
    metrics: ExceptionMetrics,
}

impl ExceptionWatcher {
    fn start(self, client: kube::Client, state: &Arc<AppState>, tasks: &mut Tasks) {
        let gate = state.add_readiness_gate("exceptions");
        tasks.add(
            "exception watcher",
            tokio::spawn(crate::exceptions_watch::run(
                client,
                self.engine,
                self.rules,
                self.cell,
                self.metrics,
                move || gate.set(true),
            )),
        );
    }
}

/// The OpenStackVersion watcher (`--kube auto`): a readiness gate holds /readyz until the
/// first list, and every snapshot swaps the engine ([`AppState::watch_releases`]).
struct ReleaseWatcher {
    mode: KubeMode,
    resync: Duration,
}

impl ReleaseWatcher {
    fn start(
        self,
        cluster: Option<&Result<kube::Client, kube::Error>>,
        state: &Arc<AppState>,
        tasks: &mut Tasks,
    ) {
        let client = match (self.mode, cluster) {
            (KubeMode::Off, _) | (_, None) => {
                tracing::info!(target: LOG_TARGET, "--kube off: release annotations use the static release table only");
                return;
            }
            (KubeMode::Auto, Some(Err(error))) => {
                tracing::warn!(
                    target: LOG_TARGET,
                    %error,
                    "no cluster access (in-cluster config or kubeconfig): release annotations \
                     use the static release table only"
                );
                return;
            }
            (KubeMode::Auto, Some(Ok(client))) => client.clone(),
        };
        let config = WatchConfig {
            resync: self.resync,
            ..WatchConfig::default()
        };
        let metrics = state.metrics.releases().clone();
        tasks.add(
            "release watcher",
            state.watch_releases(client, config, metrics),
        );
    }
}

/// The background audit (`--background-audit`): audits the cluster on a lease, with the
/// engine the server currently serves.
struct BackgroundAudit {
    config: BackgroundConfig,
    client: kube::Client,
    metrics: AuditMetrics,
}

impl BackgroundAudit {
    fn new(config: BackgroundConfig, client: kube::Client, server_metrics: &Metrics) -> Self {
        Self {
            config,
            client,
            metrics: AuditMetrics::default().counting_limits_in(server_metrics.input_limits()),
        }
    }

    fn start(self, state: &Arc<AppState>, tasks: &mut Tasks) {
        tracing::info!(
            target: LOG_TARGET,
            lease = %format!("{}/{}", self.config.lease_namespace, self.config.lease_name),
            identity = %self.config.identity,
            period_seconds = self.config.period.as_secs(),
            "background audit on"
        );
        let state = Arc::clone(state);
        tasks.add(
            "background audit",
            tokio::spawn(crate::audit::background::run(
                self.client,
                self.config,
                self.metrics,
                move || state.engine.load_full(),
            )),
        );
    }
}

/// `--tls-mode self-managed`: every replica watches the Secret and installs its serving
/// certificate into the server's handle; the replica holding the Lease rotates.
struct SelfManagedTls {
    settings: SelfManagedConfig,
    serving: ServingCert,
    metrics: RotationMetrics,
}

impl SelfManagedTls {
    fn start(self, client: kube::Client, state: &Arc<AppState>, tasks: &mut Tasks) {
        tracing::info!(
            target: LOG_TARGET,
            secret = %format!("{}/{}", self.settings.namespace, self.settings.secret_name),
            identity = %self.settings.identity,
            "self-managed TLS on: not ready until the Secret holds a certificate"
        );
        let changed = Arc::new(tokio::sync::Notify::new());
        let origin = format!(
            "Secret {}/{}",
            self.settings.namespace, self.settings.secret_name
        );
        let serving = self.serving;
        let install_state = Arc::clone(state);
        let install: crate::certs::controller::Install =
            Box::new(move |cert, key| serving.install(cert, key, &origin, &install_state.metrics));
        tasks.add(
            "self-managed TLS loader",
            tokio::spawn(crate::certs::controller::run_loader(
                client.clone(),
                self.settings.clone(),
                install,
                Arc::clone(&changed),
            )),
        );
        tasks.add(
            "self-managed TLS rotation",
            tokio::spawn(crate::certs::controller::run_rotation(
                client,
                self.settings,
                self.metrics,
                changed,
            )),
        );
    }
}

/// `stackgate audit`: connects to the cluster and audits it with `engine`, writing the
/// report to stdout and, on a terminal, progress to stderr. Returns the exit code: 0 clean,
/// 1 denials (or warnings with --fail-on warning), 2 no cluster access or a listing error.
pub fn audit(args: &AuditArgs, engine: &Engine) -> Result<u8, ComposeError> {
    use std::io::IsTerminal as _;
    let options = crate::audit::AuditOptions::from(args);
    with_cluster_client("audit", |client| async move {
        let terminal = std::io::stderr().is_terminal();
        let mut progress = |kind: &str, objects: usize| {
            if terminal {
                eprint!("\r\x1b[Kstackgate audit: listing {kind}; {objects} objects audited");
            }
        };
        let mut output = std::io::stdout().lock();
        let result = crate::audit::run(&client, engine, &options, &mut output, &mut progress).await;
        if terminal {
            eprint!("\r\x1b[K");
        }
        result.unwrap_or_else(|e| {
            eprintln!("stackgate audit: {e}");
            2
        })
    })
}

/// `stackgate uninstall`: connects to the cluster and runs the uninstall plan, printing one
/// line per object. Returns the exit code: 0 done, 2 no cluster access or a failed request.
pub fn uninstall(args: &UninstallArgs) -> Result<u8, ComposeError> {
    let plan = crate::uninstall::UninstallPlan::from(args);
    with_cluster_client("uninstall", |client| async move {
        match crate::uninstall::run(&client, &plan).await {
            Ok(steps) => {
                for step in steps {
                    println!("stackgate uninstall: {step}");
                }
                0
            }
            Err(error) => {
                eprintln!(
                    "stackgate uninstall: {}",
                    crate::cli::run::with_sources(&error)
                );
                2
            }
        }
    })
}

/// `stackgate policies --from-cluster`: reads what the current kubeconfig context's apiserver
/// serves of `admissionregistration.k8s.io` (kube's discovery) and its version, then writes
/// the output for that target (`--api-versions` entries are added, as Helm adds them to what
/// it discovered). Returns the exit code: 0 written, 2 no cluster access, a failed discovery,
/// or a target that does not serve what the output needs; 1 another error.
pub fn policies_from_cluster(args: &PoliciesArgs) -> Result<u8, ComposeError> {
    use crate::admission_policies::served::{GROUP, ServedApis};
    with_cluster_client("policies", |client| async move {
        let discovered = async {
            let discovery = kube::Discovery::new(client.clone())
                .filter(&[GROUP])
                .run()
                .await?;
            let info = client.apiserver_version().await?;
            Ok::<_, kube::Error>((discovery, info))
        };
        let (discovery, info) = match discovered.await {
            Ok(found) => found,
            Err(error) => {
                eprintln!("stackgate policies: discovery from the cluster failed: {error}");
                return 2;
            }
        };
        let version = format!("{}.{}", info.major, info.minor);
        let Ok(version) = version.parse::<crate::admission_policies::KubeVersion>() else {
            eprintln!(
                "stackgate policies: the cluster reports version {:?}, not MAJOR.MINOR",
                info.git_version
            );
            return 2;
        };
        let resources: Vec<(String, String)> = discovery
            .groups()
            .flat_map(|group| {
                group
                    .versions()
                    .flat_map(|v| group.versioned_resources(v))
                    .map(|(resource, _)| (resource.api_version, resource.kind))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut served = ServedApis::from_discovery(
            &format!("the cluster ({}, discovery)", info.git_version),
            resources.iter().map(|(a, k)| (a.as_str(), k.as_str())),
        );
        if let Err(error) = served.add_entries(&args.api_versions) {
            eprintln!("stackgate policies: {error}");
            return 2;
        }
        let target = crate::cli::run::PoliciesTarget { version, served };
        crate::cli::run::policies_exit(args, Some(target))
    })
}

/// `stackgate exceptions list`: the exceptions of `--from` (no cluster needed) or of the
/// cluster's accepted namespaces, with their state at `--now`, printed to stdout. Returns the
/// exit code: 0 listed (whatever the states), 2 unreadable files or no cluster access.
pub fn exceptions(args: &ExceptionsArgs, engine: &Engine) -> Result<u8, ComposeError> {
    use crate::exceptions_watch::list;
    let ExceptionsCommand::List(args) = &args.command;
    let rules = args.exception_rules.rules();
    let now = args.now.unwrap_or_else(k8s_openapi::jiff::Timestamp::now);
    let print = |rows: Result<Vec<list::Row>, list::ListError>| match rows {
        Ok(rows) => {
            print!(
                "{}",
                match args.format {
                    ListFormat::Text => list::text(&rows),
                    ListFormat::Json => list::json(&rows),
                }
            );
            0
        }
        Err(error) => {
            eprintln!(
                "stackgate exceptions: {}",
                crate::cli::run::with_sources(&error)
            );
            2
        }
    };
    if let Some(path) = &args.from {
        return Ok(print(list::of_files(path, engine, &rules, now)));
    }
    with_cluster_client("exceptions", |client| async move {
        print(list::of_cluster(&client, engine, &rules, now).await)
    })
}

/// Runs `command` (a one-shot CLI command named `name`) on a current-thread runtime with a
/// client of the cluster the kubeconfig or in-cluster service account names; without cluster
/// access the exit code is 2 and `command` does not run.
fn with_cluster_client<F, Fut>(name: &str, command: F) -> Result<u8, ComposeError>
where
    F: FnOnce(kube::Client) -> Fut,
    Fut: std::future::Future<Output = u8>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ComposeError::Runtime)?;
    Ok(runtime.block_on(async {
        match kube::Client::try_default().await {
            Ok(client) => command(client).await,
            Err(e) => {
                eprintln!(
                    "stackgate {name}: no cluster access (kubeconfig or in-cluster service \
                     account): {e}"
                );
                2
            }
        }
    }))
}

/// Completes on SIGTERM (what the kubelet sends) or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(target: LOG_TARGET, %error, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{FactId, Tasks, feeds};
    use crate::policy::{Mode, PolicySet};
    use crate::rules::{Check, lb_guard, ovn_source_ranges};

    /// The default policies need every fact, so every flag starts its source; turning a
    /// family's policies off stops its fact from being fed.
    #[test]
    fn only_facts_that_enabled_policies_need_are_fed() {
        let mut policies = PolicySet::embedded().expect("embedded policies");
        let needed = policies.needed_facts();
        assert_eq!(
            needed,
            [
                FactId::CloudConfig,
                FactId::Platform,
                FactId::ControlPlaneLoadBalancer,
                FactId::CcmConfigSource
            ]
        );
        assert!(feeds(&needed, FactId::CloudConfig, "--cloud-config-object"));
        for policy in &mut policies.policies {
            if policy.rule == ovn_source_ranges::FAMILY.id || policy.rule == lb_guard::FAMILY.id {
                policy.mode = Mode::Off;
            }
        }
        let needed = policies.needed_facts();
        assert_eq!(needed, [FactId::Platform, FactId::CcmConfigSource]);
        assert!(!feeds(
            &needed,
            FactId::CloudConfig,
            "--cloud-config-object"
        ));
        assert!(!feeds(
            &needed,
            FactId::ControlPlaneLoadBalancer,
            "--lb-guard on"
        ));
        assert!(!policies.family_needs(FactId::CloudConfig));
        policies.sites.sites.retain(|site| !site.other_platforms);
        assert_eq!(policies.needed_facts(), [FactId::CcmConfigSource]);
        // What a CCM reads matters only while a cloud-config family judges it.
        for policy in &mut policies.policies {
            if matches!(policy.rule.family().check, Check::CloudConfig(_)) {
                policy.mode = Mode::Off;
            }
        }
        assert!(policies.needed_facts().is_empty());
        assert!(!feeds(
            &policies.needed_facts(),
            FactId::CcmConfigSource,
            "--ccm-config-source auto"
        ));
    }

    /// Stopping the tasks ends every one of them, even one that would run forever: what it
    /// holds is dropped by the time `stop` returns, so nothing outlives the server.
    #[tokio::test]
    async fn stop_ends_every_task() {
        let held = Arc::new(());
        let mut tasks = Tasks::default();
        for name in ["forever", "also forever"] {
            let held = Arc::clone(&held);
            tasks.add(
                name,
                tokio::spawn(async move {
                    let _held = held;
                    std::future::pending::<()>().await;
                }),
            );
        }
        tasks.add("done", tokio::spawn(async {}));
        assert_eq!(tasks.len(), 3);
        assert_eq!(Arc::strong_count(&held), 3);
        tasks.stop().await;
        assert_eq!(Arc::strong_count(&held), 1);
    }
}
