//! `stackgate` binary: install the crypto provider, parse the command line, run.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;

use stackgate::check::CheckOptions;
use stackgate::cli::{
    AuditArgs, CheckArgs, Cli, Command, KubeMode, OpenShiftPlatformMode, PoliciesArgs,
    PoliciesOutput, PolicyArgs, ServeArgs,
};
use stackgate::cluster_config::watcher::CloudConfigMetrics;
use stackgate::cluster_config::{CloudConfigSource, ConfigFactCell};
use stackgate::engine::Engine;
use stackgate::guard::Guard;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::releases::{metrics::ReleaseMetrics, watcher::WatchConfig};
use stackgate::server::{self, AppState, ServerConfig};

/// How long the runtime may wait for its tasks (blocking evaluations included) after the
/// server has stopped.
const RUNTIME_SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(200);

fn main() -> ExitCode {
    // Exactly one rustls provider (ring) is compiled in; installing it explicitly keeps
    // every TLS user (server, kube client) on it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    if let Err(error) = stackgate::telemetry::init(cli.log.log_format, &cli.log.log_level) {
        eprintln!("stackgate: {error}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Policies(args) => print_policies(&args),
        Command::Check(args) => check(&args),
        Command::Audit(args) => audit(&args),
        Command::Rules(args) => load_policies(&args).map(|set| {
            print!("{}", stackgate::engine::docs::markdown(&Engine::new(set)));
            ExitCode::SUCCESS
        }),
        Command::Explain(args) => load_policies(&args.policy).and_then(|set| {
            print!(
                "{}",
                stackgate::cli::explain::explain(&Engine::new(set), &args.code)?
            );
            Ok(ExitCode::SUCCESS)
        }),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            tracing::error!(error = format!("{error:#}"), "stackgate failed");
            eprintln!("stackgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_policies(args: &PolicyArgs) -> anyhow::Result<PolicySet> {
    match &args.policies {
        Some(dir) => PolicySet::load_dir(dir)
            .with_context(|| format!("loading policies from --policies {}", dir.display())),
        None => PolicySet::embedded().context("loading the embedded default policies"),
    }
}

/// `stackgate check`: exit 0 clean, 1 denials (or warnings with --fail-on warning), 2 usage,
/// policy or parse errors.
fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let policies = match load_policies(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stackgate check: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let engine = Engine::new(policies);
    let (mut input, mut output) = (std::io::stdin().lock(), std::io::stdout().lock());
    let options = CheckOptions::from(args);
    let code =
        stackgate::check::run(&options, &engine, &mut input, &mut output).unwrap_or_else(|e| {
            eprintln!("stackgate check: {e}");
            2
        });
    Ok(ExitCode::from(code))
}

/// `stackgate audit`: exit 0 clean, 1 denials (or warnings with --fail-on warning), 2 usage,
/// policy, connection or listing errors.
fn audit(args: &AuditArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    let policies = match load_policies(&args.policy) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("stackgate audit: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let engine = Engine::new(policies);
    let options = stackgate::audit::AuditOptions::from(args);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let code = runtime.block_on(async {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "stackgate audit: no cluster access (kubeconfig or in-cluster service \
                     account): {e}"
                );
                return 2;
            }
        };
        let terminal = std::io::stderr().is_terminal();
        let mut progress = |kind: &str, objects: usize| {
            if terminal {
                eprint!("\r\x1b[Kstackgate audit: listing {kind}; {objects} objects audited");
            }
        };
        let mut output = std::io::stdout().lock();
        let result =
            stackgate::audit::run(&client, &engine, &options, &mut output, &mut progress).await;
        if terminal {
            eprint!("\r\x1b[K");
        }
        result.unwrap_or_else(|e| {
            eprintln!("stackgate audit: {e}");
            2
        })
    });
    Ok(ExitCode::from(code))
}

fn print_policies(args: &PoliciesArgs) -> anyhow::Result<ExitCode> {
    let set = load_policies(&args.policy)?;
    match args.output {
        PoliciesOutput::PolicySet => {
            print!("# effective policy set ({})\n{}", set.origin, set.to_yaml());
        }
        PoliciesOutput::AdmissionPolicies => {
            let generated = stackgate::admission_policies::generate(&set);
            print!("{}", generated.to_yaml(args.kube_version)?);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let policies = load_policies(&args.policy)?;
    tracing::info!(
        origin = %policies.origin,
        policies = policies.policies.len(),
        sites = policies.sites.sites.len(),
        "policies loaded"
    );
    let mut metrics = Metrics::new();
    metrics.set_policies_loaded(policies.policies.len());
    let release_metrics = metrics.releases().clone();
    let (kube, release_resync) = (args.kube, args.release_resync);
    let guard_config = args.guard.config();
    let background_audit = args.background_audit.config(std::env::var("HOSTNAME").ok());
    let cloud_config = args
        .cloud_config()
        .context("--cloud-config-object / STACKGATE_CLOUD_CONFIG_OBJECT")?;
    let cloud_config_metrics = CloudConfigMetrics::default();
    if cloud_config.is_some() {
        cloud_config_metrics.register(metrics.registry_mut());
    }
    let openshift_platform = args.openshift_platform;
    let platform_metrics = stackgate::platform::watcher::PlatformMetrics::default();
    if openshift_platform == OpenShiftPlatformMode::Auto {
        platform_metrics.register(metrics.registry_mut());
    }
    let config = ServerConfig::from(&args);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(async move {
        let guard = match guard_config {
            None => None,
            Some(guard_config) => {
                // Asked for explicitly: no cluster access is a start-up error, not a silent off.
                let client = kube::Client::try_default().await.context(
                    "--lb-guard on needs cluster access (in-cluster service account or kubeconfig)",
                )?;
                let guard = Guard::new(client, guard_config);
                guard.metrics().register(metrics.registry_mut());
                tracing::info!("control-plane load-balancer guard on");
                Some(Arc::new(guard))
            }
        };
        let audit_metrics = stackgate::audit::background::AuditMetrics::default();
        let audit_client = match &background_audit {
            None => None,
            Some(_) => {
                // Asked for explicitly: no cluster access is a start-up error.
                let client = kube::Client::try_default().await.context(
                    "--background-audit needs cluster access (in-cluster service account or kubeconfig)",
                )?;
                audit_metrics.register(metrics.registry_mut());
                Some(client)
            }
        };
        let cloud_config = match cloud_config {
            None => None,
            Some(object) => {
                // Asked for explicitly: no cluster access is a start-up error.
                let client = kube::Client::try_default().await.context(
                    "--cloud-config-object needs cluster access (in-cluster service account or \
                     kubeconfig)",
                )?;
                tracing::info!(object = %object.describe(), "cloud config: watching");
                Some((client, object))
            }
        };
        let mut state = AppState::new(Engine::new(policies), metrics);
        if let Some(guard) = guard {
            state = state.with_fact_source(Arc::new(stackgate::guard::GuardSource::new(guard)));
        }
        let cell = cloud_config
            .as_ref()
            .map(|(_, object)| ConfigFactCell::new(object));
        if let Some(cell) = &cell {
            state = state.with_fact_source(Arc::new(CloudConfigSource::new(cell.clone())));
        }
        let platform = match openshift_platform {
            OpenShiftPlatformMode::Off => None,
            OpenShiftPlatformMode::Auto => match kube::Client::try_default().await {
                Ok(client) => Some(client),
                Err(error) => {
                    tracing::warn!(
                        %error,
                        "--openshift-platform auto without cluster access (in-cluster config or \
                         kubeconfig): cloud configs are judged by their content alone"
                    );
                    None
                }
            },
        };
        let platform_cell = platform
            .as_ref()
            .map(|_| stackgate::platform::PlatformCell::default());
        if let Some(cell) = &platform_cell {
            // Last: the server asks the first source that wants a review, and the others
            // never want the ConfigMaps this one is for.
            state = state.with_fact_source(Arc::new(stackgate::platform::PlatformSource::new(
                cell.clone(),
            )));
        }
        let state = Arc::new(state);
        let platform_watcher = match (platform, platform_cell) {
            (Some(client), Some(cell)) => {
                let gate = state.add_readiness_gate("openshift-platform");
                tracing::info!("openshift platform: watching Infrastructure cluster");
                Some(tokio::spawn(stackgate::platform::watcher::run(
                    client,
                    cell,
                    platform_metrics,
                    move || gate.set(true),
                )))
            }
            _ => None,
        };
        let config_watcher = match (cloud_config, cell) {
            (Some((client, object)), Some(cell)) => {
                let gate = state.add_readiness_gate("cloud-config");
                Some(tokio::spawn(stackgate::cluster_config::watcher::run(
                    client,
                    object,
                    cell,
                    cloud_config_metrics,
                    move || gate.set(true),
                )))
            }
            _ => None,
        };
        let watcher = start_release_watcher(kube, release_resync, &state, release_metrics).await;
        let auditor = match (audit_client, background_audit) {
            (Some(client), Some(audit_config)) => {
                tracing::info!(
                    lease = %format!("{}/{}", audit_config.lease_namespace, audit_config.lease_name),
                    identity = %audit_config.identity,
                    period_seconds = audit_config.period.as_secs(),
                    "background audit on"
                );
                let state = state.clone();
                Some(tokio::spawn(stackgate::audit::background::run(
                    client,
                    audit_config,
                    audit_metrics,
                    move || state.engine.load_full(),
                )))
            }
            _ => None,
        };
        let served = server::run(config, state, shutdown_signal()).await;
        for task in [watcher, config_watcher, platform_watcher]
            .into_iter()
            .flatten()
        {
            task.abort();
        }
        if let Some(auditor) = auditor {
            auditor.abort();
        }
        served.context("serving")
    });
    // Dropping a runtime waits for every blocking task; an evaluation past its deadline may
    // still be running there (cancelled, but not yet at a check). The server has drained
    // and answered everything it will answer, so do not wait for it: the process must be
    // gone within --shutdown-grace (plus about a second) of the listener closing.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN_TIMEOUT);
    served?;
    Ok(ExitCode::SUCCESS)
}

/// Starts the OpenStackVersion watcher when `--kube auto` finds cluster access: a readiness
/// gate holds /readyz until the first list, and every snapshot swaps the engine.
async fn start_release_watcher(
    mode: KubeMode,
    resync: std::time::Duration,
    state: &Arc<AppState>,
    metrics: ReleaseMetrics,
) -> Option<tokio::task::JoinHandle<()>> {
    if mode == KubeMode::Off {
        tracing::info!("--kube off: release annotations use the static release table only");
        return None;
    }
    let client = match kube::Client::try_default().await {
        Ok(client) => client,
        Err(error) => {
            tracing::warn!(
                %error,
                "no cluster access (in-cluster config or kubeconfig): release annotations use \
                 the static release table only"
            );
            return None;
        }
    };
    let config = WatchConfig {
        resync,
        ..WatchConfig::default()
    };
    Some(state.watch_releases(client, config, metrics))
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
                tracing::warn!(%error, "cannot listen for SIGTERM; only Ctrl-C stops the server");
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
