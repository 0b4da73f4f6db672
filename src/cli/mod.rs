//! Command line (clap derive). Every flag can also be set from a `STACKGATE_*` environment
//! variable, which is how the Helm chart configures the server.
//!
//! Every clap argument struct lives here, and only here: the feature modules take plain
//! settings they define themselves ([`crate::server::ServerConfig`],
//! [`crate::check::CheckOptions`], [`crate::audit::AuditOptions`],
//! [`crate::guard::GuardConfig`]) and this module converts
//! the parsed arguments into them, so nothing below the command line depends on it.
//!
//! A default the owning module also uses is that module's constant (`server::DEFAULT_*`,
//! `guard::DEFAULT_*`, `check::input::DEFAULT_MAX_FILE_SIZE`); the others (log format and
//! level, `--kube`, `--lb-guard`, the check report options) exist only here. Durations are
//! written as text for `--help`, next to their flags; the tests parse a bare command line
//! and compare every default with its constant.

mod audit;
mod check;
mod exceptions;
pub mod explain;
mod guard;
pub mod reference;
pub mod run;
mod serve;
mod tls;
mod uninstall;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::telemetry::LogFormat;

pub use audit::{AuditArgs, BackgroundAuditArgs};
pub use check::CheckArgs;
pub use exceptions::{
    ExceptionArgs, ExceptionsArgs, ExceptionsCommand, ExceptionsListArgs, ListFormat,
};
pub use explain::ExplainArgs;
pub use guard::{GuardArgs, Switch};
pub use serve::{CcmConfigSourceMode, KubeMode, OpenShiftPlatformMode, ServeArgs};
pub use tls::{TlsArgs, TlsArgsError, TlsMode};
pub use uninstall::UninstallArgs;

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
    /// Print the effective policy set as YAML, or the admission policies generated from it.
    Policies(PoliciesArgs),
    /// Print every rule: what it prevents, its source and an example denial (Markdown).
    Rules(PolicyArgs),
    /// Check manifests and Helm values offline with the webhook's engine and policies.
    Check(Box<CheckArgs>),
    /// Audit the objects already in the cluster with the same engine and policies
    /// (read-only; `--fix --yes` writes the webhook's edits through the API).
    Audit(Box<AuditArgs>),
    /// Explain a finding code (e.g. `serial-lb-api-calls/false`): what, why, fix, exemption
    /// and the upstream sources.
    Explain(ExplainArgs),
    /// StackgateExceptions: `list` shows each with its state and expiry, from the cluster or
    /// from files.
    Exceptions(ExceptionsArgs),
    /// Remove what stackgate created at run time before its release is deleted (the chart's
    /// pre-delete hook): webhook configurations first, then its reports, the audit Lease and
    /// the report CRDs this release installed.
    Uninstall(UninstallArgs),
}

/// Where policies come from.
#[derive(Debug, Clone, Args)]
pub struct PolicyArgs {
    /// Directory of policy YAML files; replaces the embedded default set.
    #[arg(long, env = "STACKGATE_POLICIES", value_name = "DIR")]
    pub policies: Option<PathBuf>,
}

/// `stackgate policies`: what to print.
#[derive(Debug, Clone, Args)]
pub struct PoliciesArgs {
    /// Where policies come from.
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// `policy-set`: the effective policy set; `admission-policies`: the
    /// ValidatingAdmissionPolicies (and MutatingAdmissionPolicies, for a version that serves
    /// them) generated from it, with their bindings.
    #[arg(
        long,
        env = "STACKGATE_POLICIES_OUTPUT",
        value_enum,
        default_value = "policy-set"
    )]
    pub output: PoliciesOutput,
    /// Kubernetes version the admission policies are for (`1.30`, `v1.36.2`): the output uses
    /// only what a default apiserver of that version serves (ValidatingAdmissionPolicy v1
    /// from 1.30, MutatingAdmissionPolicy v1 from 1.36; beta versions are off by default),
    /// plus `--api-versions`. Ignored with `--from-cluster`.
    #[arg(
        long,
        env = "STACKGATE_KUBE_VERSION",
        default_value = crate::admission_policies::DEFAULT_KUBE_VERSION,
        value_parser = parse_kube_version
    )]
    pub kube_version: crate::admission_policies::KubeVersion,
    /// API versions the target serves besides `--kube-version`'s defaults, as `helm template
    /// --api-versions` takes them (repeatable or comma-separated): `group/version/Kind`, e.g.
    /// `admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy` (with its `…Binding`),
    /// or `group/version` for every kind of it.
    #[arg(
        long,
        env = "STACKGATE_API_VERSIONS",
        value_name = "API_VERSION",
        value_delimiter = ','
    )]
    pub api_versions: Vec<String>,
    /// Read what the target serves (and its version) from the current kubeconfig context's
    /// apiserver (discovery of `admissionregistration.k8s.io`), instead of `--kube-version`.
    #[arg(long, env = "STACKGATE_FROM_CLUSTER")]
    pub from_cluster: bool,
    /// Write only the validating or only the mutating policies. Without it, a target that
    /// does not serve every generated kind is refused (exit 2), so that the output of
    /// `stackgate policies … | kubectl apply -f -` always installs fully.
    #[arg(
        long,
        env = "STACKGATE_POLICIES_ONLY",
        value_enum,
        value_name = "FAMILY"
    )]
    pub only: Option<OnlyFamily>,
    /// With `--output static-manifests`: the group whose members may still delete or change
    /// stackgate's webhook configurations and admission policies.
    #[arg(
        long,
        env = "STACKGATE_BREAK_GLASS_GROUP",
        default_value = crate::admission_policies::static_manifests::DEFAULT_BREAK_GLASS_GROUP
    )]
    pub break_glass_group: String,
    /// With `--output static-manifests`: the directory to write (created; `validating/`,
    /// `mutating/` and `admission-configuration.yaml`).
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// What `stackgate policies` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PoliciesOutput {
    /// The effective policy set (YAML).
    PolicySet,
    /// Kubernetes admission policies generated from it (YAML).
    AdmissionPolicies,
    /// Static admission manifests (KEP-5793, Kubernetes 1.36+) written to DIR, with the
    /// AdmissionConfiguration that names them.
    StaticManifests,
}

/// `--only`: one family of admission policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnlyFamily {
    /// ValidatingAdmissionPolicies and their bindings (refusals).
    Validating,
    /// MutatingAdmissionPolicies and their bindings (the added setting).
    Mutating,
}

impl From<OnlyFamily> for crate::admission_policies::served::Family {
    fn from(only: OnlyFamily) -> Self {
        match only {
            OnlyFamily::Validating => Self::Validating,
            OnlyFamily::Mutating => Self::Mutating,
        }
    }
}

fn parse_kube_version(s: &str) -> Result<crate::admission_policies::KubeVersion, String> {
    s.parse()
        .map_err(|e: crate::admission_policies::AdmissionPoliciesError| e.to_string())
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

/// Parses an integer of at least 1.
fn parse_positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1 (0 would refuse every request)".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("{s:?} is not a positive integer")),
    }
}

/// Parses a duration flag: `500ms`, `2s`, `1m`, `1h` (a plain number is seconds).
///
/// The grammar is the command line's own, not Go's `time.ParseDuration`
/// ([`crate::cloudconf::parse_go_duration`], used for cloud configs and the apiserver's
/// `?timeout=`): one non-negative decimal number (fractions allowed: `1.5s`, `.5s`) and at
/// most one unit out of `ms`, `s`, `m`, `h`; no sign, no compound values (`1m30s`), no `us`
/// or `ns`. Surrounding whitespace is ignored. It stays separate from Go's: a plain number
/// means seconds here (`3`; Go refuses it), so Go's grammar would refuse settings that work
/// today.
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

    /// `argv` parsed as the binary would parse it.
    pub(super) fn parse(argv: &[&str]) -> Cli {
        Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    /// The documented grammar, including what it refuses that Go would accept.
    #[test]
    fn duration_grammar_is_the_command_lines_own() {
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration(" 2h "), Ok(Duration::from_secs(7200)));
        for go_only in ["1m30s", "10us", "10ns", "-1s", "+1s"] {
            assert!(parse_duration(go_only).is_err(), "{go_only}");
        }
    }

    #[test]
    fn cli_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn policies_output_defaults_and_kube_version() {
        let Command::Policies(args) = parse(&["stackgate", "policies"]).command else {
            panic!("not policies");
        };
        assert_eq!(args.output, PoliciesOutput::PolicySet);
        assert_eq!(
            args.kube_version,
            crate::admission_policies::DEFAULT_KUBE_VERSION
                .parse()
                .unwrap()
        );
        let argv = [
            "stackgate",
            "policies",
            "--output",
            "admission-policies",
            "--kube-version",
            "v1.36.2",
        ];
        let Command::Policies(args) = parse(&argv).command else {
            panic!("not policies");
        };
        assert_eq!(args.output, PoliciesOutput::AdmissionPolicies);
        assert_eq!(args.kube_version.minor, 36);
        assert!(Cli::try_parse_from(["stackgate", "policies", "--kube-version", "x"]).is_err());
    }

    #[test]
    fn log_defaults() {
        let cli = parse(&["stackgate", "policies"]);
        assert_eq!(cli.log.log_format, LogFormat::Text);
        assert_eq!(cli.log.log_level, "info");
    }
}
