//! `stackgate serve` flags of the serving certificate's mode (`--tls-mode`) and of the
//! self-managed certificate (`--tls-secret`, lifetimes, ...).

use std::time::Duration;

use clap::Args;

use super::parse_duration;
use crate::certs::controller::{DEFAULT_LEASE_NAME, SelfManagedConfig};
use crate::certs::rotation::{Policy, PolicyError};

/// Default `--tls-serving-lifetime` (90 days, as cert-manager's default duration).
const SERVING_LIFETIME: &str = "2160h";
/// Default `--tls-ca-lifetime` (5 years).
const CA_LIFETIME: &str = "43800h";
/// Default `--tls-bundle-settle`.
const BUNDLE_SETTLE: &str = "30s";
/// Default `--tls-report-interval`.
const REPORT_INTERVAL: &str = "30s";
/// Default `--tls-lease-duration`.
const LEASE_DURATION: &str = "60s";

/// `--tls-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMode {
    /// `--tls-cert`/`--tls-key`, re-read every `--tls-reload-interval`; without them a
    /// development certificate for localhost is generated at start.
    Files,
    /// stackgate keeps its own CA and serving certificate in the Secret `--tls-secret`
    /// (needs cluster access): one replica, elected with a Lease, creates and rotates them
    /// and keeps the `caBundle` of the webhook configurations `--tls-webhook-configuration`
    /// current; every replica watches the Secret and reloads without a restart.
    SelfManaged,
}

/// The serving certificate's mode and the self-managed certificate's settings.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    /// Where the serving certificate comes from.
    #[arg(long, env = "STACKGATE_TLS_MODE", value_enum, default_value = "files")]
    pub tls_mode: TlsMode,
    /// Self-managed: the Secret holding the CAs and the serving certificate (get, list,
    /// watch, update and patch on that name; create only if the chart does not make it).
    #[arg(long, env = "STACKGATE_TLS_SECRET", default_value = "stackgate-certs")]
    pub tls_secret: String,
    /// Self-managed: the namespace of the Secret and the Lease (the chart sets the release
    /// namespace).
    #[arg(long, env = "STACKGATE_TLS_NAMESPACE")]
    pub tls_namespace: Option<String>,
    /// Self-managed: the name of stackgate's MutatingWebhookConfiguration and
    /// ValidatingWebhookConfiguration whose webhooks' caBundle is kept equal to the CA bundle
    /// (only if labelled app.kubernetes.io/part-of=stackgate).
    #[arg(
        long,
        env = "STACKGATE_TLS_WEBHOOK_CONFIGURATION",
        default_value = "stackgate"
    )]
    pub tls_webhook_configuration: String,
    /// Self-managed: the serving certificate's DNS names, comma-separated (the Service's
    /// `<name>.<namespace>.svc` first).
    #[arg(long, env = "STACKGATE_TLS_DNS_NAMES", value_delimiter = ',')]
    pub tls_dns_names: Vec<String>,
    /// Self-managed: this replica's identity in the Lease and in its report; default: the
    /// HOSTNAME environment variable (the pod name).
    #[arg(long, env = "STACKGATE_TLS_IDENTITY")]
    pub tls_identity: Option<String>,
    /// Self-managed: the Lease electing the replica that writes the Secret.
    #[arg(long, env = "STACKGATE_TLS_LEASE_NAME", default_value = DEFAULT_LEASE_NAME)]
    pub tls_lease_name: String,
    /// Self-managed: how long the Lease stays held without renewal (renewed every third).
    #[arg(long, env = "STACKGATE_TLS_LEASE_DURATION", default_value = LEASE_DURATION, value_parser = parse_duration)]
    pub tls_lease_duration: Duration,
    /// Self-managed: the serving certificate's lifetime; renewed when two thirds have passed.
    #[arg(long, env = "STACKGATE_TLS_SERVING_LIFETIME", default_value = SERVING_LIFETIME, value_parser = parse_duration)]
    pub tls_serving_lifetime: Duration,
    /// Self-managed: the CA's lifetime (at least three serving lifetimes); its rotation starts
    /// when two thirds have passed.
    #[arg(long, env = "STACKGATE_TLS_CA_LIFETIME", default_value = CA_LIFETIME, value_parser = parse_duration)]
    pub tls_ca_lifetime: Duration,
    /// Self-managed: how long after a new CA bundle is in the webhook configurations the
    /// serving certificate may switch to the new CA (every apiserver must have seen it).
    #[arg(long, env = "STACKGATE_TLS_BUNDLE_SETTLE", default_value = BUNDLE_SETTLE, value_parser = parse_duration)]
    pub tls_bundle_settle: Duration,
    /// Self-managed: how often each replica reports what it loaded (a replica silent for
    /// three intervals no longer holds a CA rotation up).
    #[arg(long, env = "STACKGATE_TLS_REPORT_INTERVAL", default_value = REPORT_INTERVAL, value_parser = parse_duration)]
    pub tls_report_interval: Duration,
}

/// Why the self-managed settings are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsArgsError {
    /// A setting the mode needs is missing.
    #[error("--tls-mode self-managed needs {0}")]
    Missing(&'static str),
    /// `--tls-cert`/`--tls-key` with `--tls-mode self-managed`.
    #[error("--tls-cert/--tls-key are for --tls-mode files, not self-managed")]
    FilesGiven,
    /// The lifetimes do not fit together.
    #[error("--tls-serving-lifetime / --tls-ca-lifetime / --tls-report-interval: {0}")]
    Policy(#[from] PolicyError),
}

fn seconds(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

impl TlsArgs {
    /// The self-managed settings, or None in `files` mode. `hostname` is the fallback
    /// identity; `files_given` whether `--tls-cert` was given.
    pub fn self_managed(
        &self,
        hostname: Option<String>,
        files_given: bool,
    ) -> Result<Option<SelfManagedConfig>, TlsArgsError> {
        if self.tls_mode == TlsMode::Files {
            return Ok(None);
        }
        if files_given {
            return Err(TlsArgsError::FilesGiven);
        }
        let namespace = self
            .tls_namespace
            .clone()
            .ok_or(TlsArgsError::Missing("--tls-namespace"))?;
        if self.tls_dns_names.is_empty() {
            return Err(TlsArgsError::Missing("--tls-dns-names"));
        }
        let identity = self
            .tls_identity
            .clone()
            .or(hostname)
            .ok_or(TlsArgsError::Missing("--tls-identity (or HOSTNAME)"))?;
        let policy = Policy {
            serving_lifetime: seconds(self.tls_serving_lifetime),
            ca_lifetime: seconds(self.tls_ca_lifetime),
            settle: seconds(self.tls_bundle_settle),
            report_interval: seconds(self.tls_report_interval),
        };
        policy.check()?;
        Ok(Some(SelfManagedConfig {
            namespace,
            secret_name: self.tls_secret.clone(),
            webhook_configuration: self.tls_webhook_configuration.clone(),
            dns_names: self.tls_dns_names.clone(),
            identity,
            lease_name: self.tls_lease_name.clone(),
            lease_duration: self.tls_lease_duration,
            policy,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;
    use crate::cli::tests::parse;

    fn tls(argv: &[&str]) -> TlsArgs {
        let mut full = vec!["stackgate", "serve"];
        full.extend_from_slice(argv);
        match parse(&full).command {
            Command::Serve(args) => args.tls,
            other => panic!("not serve: {other:?}"),
        }
    }

    const SELF_MANAGED: [&str; 6] = [
        "--tls-mode=self-managed",
        "--tls-namespace=stackgate",
        "--tls-dns-names=stackgate.stackgate.svc,stackgate.stackgate.svc.cluster.local",
        "--tls-serving-lifetime=2m",
        "--tls-ca-lifetime=10m",
        "--tls-report-interval=5s",
    ];

    #[test]
    fn files_mode_has_no_self_managed_settings() {
        assert_eq!(tls(&[]).tls_mode, TlsMode::Files);
        assert_eq!(tls(&[]).self_managed(Some("pod".into()), false), Ok(None));
    }

    #[test]
    fn self_managed_settings_come_from_the_flags() {
        let config = tls(&SELF_MANAGED)
            .self_managed(Some("pod-a".into()), false)
            .unwrap()
            .unwrap();
        assert_eq!(config.namespace, "stackgate");
        assert_eq!(config.secret_name, "stackgate-certs");
        assert_eq!(config.lease_name, DEFAULT_LEASE_NAME);
        assert_eq!(config.webhook_configuration, "stackgate");
        assert_eq!(config.identity, "pod-a", "HOSTNAME when no --tls-identity");
        assert_eq!(
            config.dns_names,
            [
                "stackgate.stackgate.svc",
                "stackgate.stackgate.svc.cluster.local"
            ]
        );
        assert_eq!(
            config.policy,
            Policy {
                serving_lifetime: 120,
                ca_lifetime: 600,
                settle: 30,
                report_interval: 5,
            }
        );
        let mut argv = SELF_MANAGED.to_vec();
        argv.push("--tls-identity=explicit");
        let config = tls(&argv).self_managed(Some("pod-a".into()), false);
        assert_eq!(config.unwrap().unwrap().identity, "explicit");
    }

    #[test]
    fn incomplete_or_contradictory_self_managed_settings_are_refused() {
        let refused = |argv: &[&str], files: bool| {
            tls(argv)
                .self_managed(Some("pod".into()), files)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused(&SELF_MANAGED, true),
            "--tls-cert/--tls-key are for --tls-mode files, not self-managed"
        );
        assert_eq!(
            refused(&SELF_MANAGED[..1], false),
            "--tls-mode self-managed needs --tls-namespace"
        );
        assert_eq!(
            refused(&SELF_MANAGED[..2], false),
            "--tls-mode self-managed needs --tls-dns-names"
        );
        let mut short = SELF_MANAGED[..5].to_vec();
        short[4] = "--tls-ca-lifetime=5m";
        assert!(refused(&short, false).contains("at least three serving-certificate lifetimes"));
        assert_eq!(
            tls(&SELF_MANAGED).self_managed(None, false).unwrap_err(),
            TlsArgsError::Missing("--tls-identity (or HOSTNAME)")
        );
    }
}
