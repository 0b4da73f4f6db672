//! Command line (clap derive). Every flag can also be set from a `STACKGATE_*` environment
//! variable, which is how the Helm chart configures the server.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::telemetry::LogFormat;

/// stackgate: admission webhook and GitOps checker for OpenStack on Kubernetes.
#[derive(Debug, Parser)]
#[command(name = "stackgate", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Logging options.
    #[command(flatten)]
    pub log: LogArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTPS admission webhook (POST /mutate, POST /validate) and the admin listener.
    Serve(Box<ServeArgs>),
    /// Print the effective policy set as YAML.
    Policies(PolicyArgs),
    /// Print every rule: what it prevents, its source and an example denial (Markdown).
    Rules(PolicyArgs),
    /// Check manifests and Helm values offline with the webhook's engine and policies.
    Check(Box<crate::check::CheckArgs>),
}

/// Where policies come from.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Directory of policy YAML files; replaces the embedded default set.
    #[arg(long, env = "STACKGATE_POLICIES", value_name = "DIR")]
    pub policies: Option<PathBuf>,
}

/// Logging flags.
#[derive(Debug, Clone, Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(
        long,
        env = "STACKGATE_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    pub log_format: LogFormat,
    /// Log filter directive (tracing EnvFilter syntax), e.g. `info` or `stackgate=debug,warn`.
    #[arg(
        long,
        env = "STACKGATE_LOG_LEVEL",
        default_value = "info",
        global = true
    )]
    pub log_level: String,
}

/// `stackgate serve` flags.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// HTTPS address for the webhook endpoints.
    #[arg(long, env = "STACKGATE_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Plain-HTTP address for /healthz, /readyz and /metrics.
    #[arg(long, env = "STACKGATE_ADMIN_LISTEN", default_value = "0.0.0.0:8080")]
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
    #[arg(long, env = "STACKGATE_GENERATED_CA_OUT", default_value_os_t = default_ca_out())]
    pub generated_ca_out: PathBuf,
    /// Require client certificates signed by this CA (PEM), e.g. the apiserver's.
    #[arg(long, env = "STACKGATE_CLIENT_CA", value_name = "PEM")]
    pub client_ca: Option<PathBuf>,
    /// How often certificate files are re-read (kubelet symlink swaps included).
    #[arg(long, env = "STACKGATE_TLS_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub tls_reload_interval: Duration,
    /// Largest accepted request body in bytes (an AdmissionReview carries object and oldObject).
    #[arg(long, env = "STACKGATE_MAX_BODY_BYTES", default_value_t = 6 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Reviews evaluated at once; more wait until their deadline.
    #[arg(long, env = "STACKGATE_MAX_CONCURRENCY", default_value_t = 256, value_parser = parse_positive)]
    pub max_concurrency: usize,
    /// Time a client has to send its request headers.
    #[arg(long, env = "STACKGATE_HEADER_READ_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Per-request deadline; also capped by the apiserver's `?timeout=` minus a margin.
    #[arg(long, env = "STACKGATE_REQUEST_TIMEOUT", default_value = "2s", value_parser = parse_duration)]
    pub request_timeout: Duration,
    /// How long in-flight requests may take to finish once the listener has closed (after
    /// --shutdown-delay); the process is gone at most about a second later, even if an
    /// evaluation is still running.
    #[arg(long, env = "STACKGATE_SHUTDOWN_GRACE", default_value = "20s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,
    /// After SIGTERM, keep accepting and answering (readiness already failing) for this long
    /// before closing connections, while endpoints and the apiserver stop routing here.
    #[arg(long, env = "STACKGATE_SHUTDOWN_DELAY", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Open connections on the webhook listener; more are closed at once (and counted).
    #[arg(long, env = "STACKGATE_MAX_CONNECTIONS", default_value_t = 1024, value_parser = parse_positive)]
    pub max_connections: usize,
    /// Open connections on the admin listener (probes, scrapes); more are closed at once.
    #[arg(long, env = "STACKGATE_ADMIN_MAX_CONNECTIONS", default_value_t = 64, value_parser = parse_positive)]
    pub admin_max_connections: usize,
    /// A connection with no request in flight for this long is closed gracefully (HTTP/2
    /// GOAWAY; idle HTTP/1.1 connections already close after --header-read-timeout).
    #[arg(long, env = "STACKGATE_IDLE_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// A socket write that makes no progress for this long (the client stopped reading)
    /// closes the connection; so does a response not written --request-timeout plus this
    /// long after its request started.
    #[arg(long, env = "STACKGATE_WRITE_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub write_timeout: Duration,
    /// Request body bytes being read or evaluated at once, across all reviews; more wait
    /// (until their deadline, then the overload answer). Bounds the memory of concurrent
    /// large reviews.
    #[arg(long, env = "STACKGATE_MAX_INFLIGHT_BODY_BYTES", default_value_t = 16 * 1024 * 1024, value_parser = parse_positive)]
    pub max_inflight_body_bytes: usize,
    /// Evaluations of request bodies over 64 KiB running at once; 0 = one per CPU core the
    /// process may use (the cgroup quota counts). More wait, until their deadline.
    #[arg(long, env = "STACKGATE_MAX_LARGE_EVALUATIONS", default_value_t = 0)]
    pub max_large_evaluations: usize,
    /// Policy source.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Live release data from OpenStackVersion objects: `auto` watches them when cluster
    /// access is configured (in-cluster or kubeconfig) and holds /readyz until the first
    /// list; `off` uses only the static release table.
    #[arg(long, env = "STACKGATE_KUBE", value_enum, default_value = "auto")]
    pub kube: KubeMode,
    /// How often the OpenStackVersion watcher relists (confirms the snapshot in quiet clusters).
    #[arg(long, env = "STACKGATE_RELEASE_RESYNC", default_value = "5m", value_parser = parse_duration)]
    pub release_resync: Duration,
    /// Control-plane load-balancer guard (`--lb-guard`, `--openstack-timeout`,
    /// `--octavia-cache-ttl`).
    #[command(flatten)]
    pub guard: crate::guard::GuardArgs,
}

/// `--kube`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KubeMode {
    /// Watch OpenStackVersions when cluster access is configured.
    Auto,
    /// No cluster access: static release table only.
    Off,
}

fn default_ca_out() -> PathBuf {
    std::env::temp_dir().join("stackgate-ca.pem")
}

/// Parses an integer of at least 1.
fn parse_positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1 (0 would refuse every request)".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a positive integer")),
    }
}

/// Parses `500ms`, `2s`, `1m`, `1h` (a plain number is seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (digits, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let n: f64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 500ms, 2s or 1m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{s:?}: unit must be ms, s, m or h")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
