//! `stackgate serve` flags and their conversion into [`ServerConfig`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{GuardArgs, PolicyArgs, parse_duration, parse_positive};
use crate::cluster_config::{self, ConfigObject, ConfigObjectError};
use crate::server::{self, ServerConfig, TlsSource};

// Duration defaults as `--help` shows them. clap needs the text (a `Duration` has no
// `Display`, and the forms differ: `60s`, not `1m`, but `5m`, not `300s`); the value is the
// owning module's constant, and `tests::serve_defaults_are_the_server_constants` checks
// that each text parses to it.

/// [`server::DEFAULT_TLS_RELOAD_INTERVAL`].
const TLS_RELOAD_INTERVAL: &str = "10s";
/// [`server::DEFAULT_HEADER_READ_TIMEOUT`].
const HEADER_READ_TIMEOUT: &str = "5s";
/// [`server::DEFAULT_REQUEST_TIMEOUT`].
const REQUEST_TIMEOUT: &str = "2s";
/// [`server::DEFAULT_SHUTDOWN_GRACE`].
const SHUTDOWN_GRACE: &str = "20s";
/// [`server::DEFAULT_SHUTDOWN_DELAY`].
const SHUTDOWN_DELAY: &str = "5s";
/// [`server::DEFAULT_IDLE_TIMEOUT`].
const IDLE_TIMEOUT: &str = "60s";
/// [`server::DEFAULT_WRITE_TIMEOUT`].
const WRITE_TIMEOUT: &str = "10s";
/// The release watcher's default resync (`releases::watcher::WatchConfig::default`).
const RELEASE_RESYNC: &str = "5m";

/// `stackgate serve` flags.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// HTTPS address for the webhook endpoints.
    #[arg(long, env = "STACKGATE_LISTEN", default_value_t = server::DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Plain-HTTP address for /healthz, /readyz and /metrics.
    #[arg(long, env = "STACKGATE_ADMIN_LISTEN", default_value_t = server::DEFAULT_ADMIN_LISTEN)]
    pub admin_listen: SocketAddr,
    /// Serving certificate chain (PEM). Without --tls-cert/--tls-key a CA and a localhost
    /// certificate are generated at start.
    #[arg(
        long,
        env = "STACKGATE_TLS_CERT",
        requires = "tls_key",
        value_name = "PEM"
    )]
    pub tls_cert: Option<PathBuf>,
    /// Private key of the serving certificate (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(
        long,
        env = "STACKGATE_TLS_KEY",
        requires = "tls_cert",
        value_name = "PEM"
    )]
    pub tls_key: Option<PathBuf>,
    /// Where the generated CA certificate is written when no certificate is given.
    #[arg(long, env = "STACKGATE_GENERATED_CA_OUT", default_value_os_t = server::default_generated_ca_out())]
    pub generated_ca_out: PathBuf,
    /// Require client certificates signed by this CA (PEM), e.g. the apiserver's.
    #[arg(long, env = "STACKGATE_CLIENT_CA", value_name = "PEM")]
    pub client_ca: Option<PathBuf>,
    /// How often certificate files are re-read (kubelet symlink swaps included).
    #[arg(long, env = "STACKGATE_TLS_RELOAD_INTERVAL", default_value = TLS_RELOAD_INTERVAL, value_parser = parse_duration)]
    pub tls_reload_interval: Duration,
    /// Largest accepted request body in bytes (an AdmissionReview carries object and oldObject).
    #[arg(long, env = "STACKGATE_MAX_BODY_BYTES", default_value_t = server::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Reviews evaluated at once; more wait until their deadline.
    #[arg(long, env = "STACKGATE_MAX_CONCURRENCY", default_value_t = server::DEFAULT_MAX_CONCURRENCY, value_parser = parse_positive)]
    pub max_concurrency: usize,
    /// Time a client has to send its request headers.
    #[arg(long, env = "STACKGATE_HEADER_READ_TIMEOUT", default_value = HEADER_READ_TIMEOUT, value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Per-request deadline; also capped by the apiserver's `?timeout=` minus a margin.
    #[arg(long, env = "STACKGATE_REQUEST_TIMEOUT", default_value = REQUEST_TIMEOUT, value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// How long in-flight requests may take to finish once the listener has closed (after
    /// --shutdown-delay); the process is gone at most about a second later, even if an
    /// evaluation is still running.
    #[arg(long, env = "STACKGATE_SHUTDOWN_GRACE", default_value = SHUTDOWN_GRACE, value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// After SIGTERM, keep accepting and answering (readiness already failing) for this long
    /// before closing connections, while endpoints and the apiserver stop routing here.
    #[arg(long, env = "STACKGATE_SHUTDOWN_DELAY", default_value = SHUTDOWN_DELAY, value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Open connections on the webhook listener; more are closed at once (and counted).
    #[arg(long, env = "STACKGATE_MAX_CONNECTIONS", default_value_t = server::DEFAULT_MAX_CONNECTIONS, value_parser = parse_positive)]
    pub max_connections: usize,
    /// Open connections on the admin listener (probes, scrapes); more are closed at once.
    #[arg(long, env = "STACKGATE_ADMIN_MAX_CONNECTIONS", default_value_t = server::DEFAULT_ADMIN_MAX_CONNECTIONS, value_parser = parse_positive)]
    pub admin_max_connections: usize,
    /// A connection with no request in flight for this long is closed gracefully (HTTP/2
    /// GOAWAY; idle HTTP/1.1 connections already close after --header-read-timeout).
    #[arg(long, env = "STACKGATE_IDLE_TIMEOUT", default_value = IDLE_TIMEOUT, value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// A socket write that makes no progress for this long (the client stopped reading)
    /// closes the connection; so does a response not written --request-timeout plus this
    /// long after its request started.
    #[arg(long, env = "STACKGATE_WRITE_TIMEOUT", default_value = WRITE_TIMEOUT, value_parser = parse_duration)]
    pub write_timeout: Duration,
    /// Request body bytes being read or evaluated at once, across all reviews; more wait
    /// (until their deadline, then the overload answer). Bounds the memory of concurrent
    /// large reviews.
    #[arg(long, env = "STACKGATE_MAX_INFLIGHT_BODY_BYTES", default_value_t = server::DEFAULT_MAX_INFLIGHT_BODY_BYTES, value_parser = parse_positive)]
    pub max_inflight_body_bytes: usize,
    /// Evaluations of request bodies over 64 KiB running at once; 0 = one per CPU core the
    /// process may use (the cgroup quota counts). More wait, until their deadline.
    #[arg(long, env = "STACKGATE_MAX_LARGE_EVALUATIONS", default_value_t = server::DEFAULT_MAX_LARGE_EVALUATIONS)]
    pub max_large_evaluations: usize,
    /// Bytes of memory one review's decoding, evaluation and encoding may hold; past it the
    /// evaluation stops and the review is answered "over stackgate's limit" (mutate admits
    /// unchanged with a warning, validate refuses with 413). Bounds the memory of any shape
    /// of input, capped or not (docs/limits.md).
    #[arg(long, env = "STACKGATE_MAX_EVALUATION_MEMORY", default_value_t = server::DEFAULT_MAX_EVALUATION_MEMORY, value_parser = parse_positive)]
    pub max_evaluation_memory: usize,
    /// Policy source.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Live release data from OpenStackVersion objects: `auto` watches them when cluster
    /// access is configured (in-cluster or kubeconfig) and holds /readyz until the first
    /// list; `off` uses only the static release table.
    #[arg(long, env = "STACKGATE_KUBE", value_enum, default_value = "auto")]
    pub kube: KubeMode,
    /// How often the OpenStackVersion watcher relists (confirms the snapshot in quiet clusters).
    #[arg(long, env = "STACKGATE_RELEASE_RESYNC", default_value = RELEASE_RESYNC, value_parser = parse_duration)]
    pub release_resync: Duration,
    /// The Secret or ConfigMap holding the cluster's CCM cloud config, as
    /// `Secret/<namespace>/<name>` or `ConfigMap/<namespace>/<name>`: watched by name (needs
    /// get, list and watch on that one object) for rules that judge other objects by it
    /// (ovn-source-ranges). Unset: those rules warn that they cannot see it.
    #[arg(
        long,
        env = "STACKGATE_CLOUD_CONFIG_OBJECT",
        value_name = "KIND/NAMESPACE/NAME"
    )]
    pub cloud_config_object: Option<String>,
    /// The data key of --cloud-config-object that holds the INI text.
    #[arg(long, env = "STACKGATE_CLOUD_CONFIG_KEY", default_value = cluster_config::DEFAULT_KEY)]
    pub cloud_config_key: String,
    /// OpenShift platform awareness: `auto` watches the `Infrastructure` object `cluster`
    /// (needs get, list and watch on infrastructures.config.openshift.io named `cluster`) and,
    /// on a platform other than OpenStack, leaves openshift-config/cloud-provider-config and
    /// its copies alone whatever they hold. Off a cluster without that API it costs one request.
    /// `off`: those ConfigMaps are judged by their content alone.
    #[arg(
        long,
        env = "STACKGATE_OPENSHIFT_PLATFORM",
        value_enum,
        default_value = "off"
    )]
    pub openshift_platform: OpenShiftPlatformMode,
    /// Cloud configs found from the CCM's own pod spec: `auto` lists and watches every
    /// Deployment and DaemonSet (needs list and watch on deployments and daemonsets in
    /// group apps, cluster-wide), and judges the Secret and ConfigMap keys their OpenStack CCM
    /// containers read as `--cloud-config` as cloud-config sites, whatever their names; holds
    /// /readyz until the first list. `off`: only the named and labelled sites.
    #[arg(
        long,
        env = "STACKGATE_CCM_CONFIG_SOURCE",
        value_enum,
        default_value = "off"
    )]
    pub ccm_config_source: CcmConfigSourceMode,
    /// Apply the cluster's StackgateException objects: watch them in each
    /// `--exception-namespaces` namespace (needs list and watch on
    /// stackgateexceptions.stackgate.dev there, and the chart's CRD) and judge each review
    /// against them at its own instant; holds /readyz until the first list or refusal.
    #[arg(
        long,
        env = "STACKGATE_WATCH_EXCEPTIONS",
        value_name = "BOOL",
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub watch_exceptions: bool,
    /// Where exceptions are accepted and how long they may live.
    #[command(flatten)]
    pub exception_rules: super::ExceptionArgs,
    /// Control-plane load-balancer guard (`--lb-guard`, `--openstack-timeout`,
    /// `--octavia-cache-ttl`).
    #[command(flatten)]
    pub guard: GuardArgs,
    /// Background audit with PolicyReports (`--background-audit`, ...).
    #[command(flatten)]
    pub background_audit: super::BackgroundAuditArgs,
    /// The serving certificate's mode (`--tls-mode`) and the self-managed certificate.
    #[command(flatten)]
    pub tls: super::TlsArgs,
}

impl ServeArgs {
    /// The cloud-config object to watch, when `--cloud-config-object` is set.
    pub fn cloud_config(&self) -> Result<Option<ConfigObject>, ConfigObjectError> {
        self.cloud_config_object
            .as_deref()
            .map(|o| ConfigObject::parse(o, &self.cloud_config_key))
            .transpose()
    }
}

/// `--openshift-platform`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OpenShiftPlatformMode {
    /// Watch the OpenShift `Infrastructure` object when cluster access is configured.
    Auto,
    /// Decide from the cloud config's content alone.
    Off,
}

/// `--ccm-config-source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CcmConfigSourceMode {
    /// Watch Deployments and DaemonSets when cluster access is configured.
    Auto,
    /// Only the named and labelled sites.
    Off,
}

/// `--kube`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KubeMode {
    /// Watch OpenStackVersions when cluster access is configured.
    Auto,
    /// No cluster access: static release table only.
    Off,
}

impl From<&ServeArgs> for ServerConfig {
    /// The server's settings from the flags; what no flag sets keeps its default. Policies,
    /// the release watcher and the guard are set up by the caller from the other flags.
    fn from(args: &ServeArgs) -> Self {
        // Destructured, so that a new flag cannot be forgotten here silently.
        let ServeArgs {
            listen,
            admin_listen,
            tls_cert,
            tls_key,
            generated_ca_out,
            client_ca,
            tls_reload_interval,
            max_body_bytes,
            max_concurrency,
            header_read_timeout,
            request_timeout,
            shutdown_grace,
            shutdown_delay,
            max_connections,
            admin_max_connections,
            idle_timeout,
            write_timeout,
            max_inflight_body_bytes,
            max_large_evaluations,
            max_evaluation_memory,
            policy: _,
            kube: _,
            release_resync: _,
            cloud_config_object: _,
            cloud_config_key: _,
            openshift_platform: _,
            ccm_config_source: _,
            watch_exceptions: _,
            exception_rules: _,
            guard: _,
            background_audit: _,
            tls: tls_args,
        } = args;
        let tls = match (tls_cert, tls_key) {
            // `self_managed` refuses certificate files with this mode; the handle is empty
            // until the Secret watch installs a certificate.
            _ if tls_args.tls_mode == super::TlsMode::SelfManaged => {
                TlsSource::SelfManaged(server::ServingCert::default())
            }
            (Some(cert), Some(key)) => TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            // clap's `requires` makes the two flags come together.
            _ => TlsSource::Generated {
                ca_out: generated_ca_out.clone(),
            },
        };
        ServerConfig {
            listen: *listen,
            admin_listen: *admin_listen,
            tls,
            client_ca: client_ca.clone(),
            tls_reload_interval: *tls_reload_interval,
            max_body_bytes: *max_body_bytes,
            max_concurrency: *max_concurrency,
            header_read_timeout: *header_read_timeout,
            request_timeout: *request_timeout,
            shutdown_grace: *shutdown_grace,
            shutdown_delay: *shutdown_delay,
            max_connections: *max_connections,
            admin_max_connections: *admin_max_connections,
            idle_timeout: *idle_timeout,
            write_timeout: *write_timeout,
            max_inflight_body_bytes: *max_inflight_body_bytes,
            max_large_evaluations: *max_large_evaluations,
            max_evaluation_memory: *max_evaluation_memory,
            ..ServerConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;
    use crate::cli::tests::parse;
    use crate::releases::watcher::WatchConfig;

    fn serve(argv: &[&str]) -> ServeArgs {
        match parse(argv).command {
            Command::Serve(args) => *args,
            other => panic!("{argv:?}: not serve: {other:?}"),
        }
    }

    #[test]
    fn serve_defaults_are_the_server_constants() {
        let args = serve(&["stackgate", "serve"]);
        assert_eq!(args.listen, server::DEFAULT_LISTEN);
        assert_eq!(args.admin_listen, server::DEFAULT_ADMIN_LISTEN);
        assert_eq!(args.generated_ca_out, server::default_generated_ca_out());
        assert_eq!(
            args.tls_reload_interval,
            server::DEFAULT_TLS_RELOAD_INTERVAL
        );
        assert_eq!(args.max_body_bytes, server::DEFAULT_MAX_BODY_BYTES);
        assert_eq!(args.max_concurrency, server::DEFAULT_MAX_CONCURRENCY);
        assert_eq!(
            args.header_read_timeout,
            server::DEFAULT_HEADER_READ_TIMEOUT
        );
        assert_eq!(args.request_timeout, server::DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(args.shutdown_grace, server::DEFAULT_SHUTDOWN_GRACE);
        assert_eq!(args.shutdown_delay, server::DEFAULT_SHUTDOWN_DELAY);
        assert_eq!(args.max_connections, server::DEFAULT_MAX_CONNECTIONS);
        assert_eq!(
            args.admin_max_connections,
            server::DEFAULT_ADMIN_MAX_CONNECTIONS
        );
        assert_eq!(args.idle_timeout, server::DEFAULT_IDLE_TIMEOUT);
        assert_eq!(args.write_timeout, server::DEFAULT_WRITE_TIMEOUT);
        assert_eq!(
            args.max_inflight_body_bytes,
            server::DEFAULT_MAX_INFLIGHT_BODY_BYTES
        );
        assert_eq!(
            args.max_large_evaluations,
            server::DEFAULT_MAX_LARGE_EVALUATIONS
        );
        assert_eq!(
            args.max_evaluation_memory,
            server::DEFAULT_MAX_EVALUATION_MEMORY
        );
        assert_eq!(args.release_resync, WatchConfig::default().resync);
        assert_eq!(args.cloud_config_key, crate::cluster_config::DEFAULT_KEY);
        assert_eq!(args.cloud_config(), Ok(None));
        assert_eq!(args.openshift_platform, OpenShiftPlatformMode::Off);
        assert_eq!(args.ccm_config_source, CcmConfigSourceMode::Off);
        assert!(!args.watch_exceptions);
        assert_eq!(
            args.exception_rules.rules(),
            crate::policy::exception::ExceptionRules::default()
        );
        assert_eq!(args.kube, KubeMode::Auto);
        assert_eq!(args.policy.policies, None);
        // The whole conversion: no flag given is the server's own default.
        assert_eq!(ServerConfig::from(&args), ServerConfig::default());
    }

    #[test]
    fn certificate_files_replace_the_generated_certificate() {
        let args = serve(&[
            "stackgate",
            "serve",
            "--tls-cert=c.pem",
            "--tls-key=k.pem",
            "--request-timeout=3s",
        ]);
        let config = ServerConfig::from(&args);
        assert_eq!(
            config.tls,
            TlsSource::Files {
                cert: "c.pem".into(),
                key: "k.pem".into()
            }
        );
        assert_eq!(config.request_timeout, Duration::from_secs(3));
    }
}
