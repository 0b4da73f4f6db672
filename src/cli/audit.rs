//! `stackgate audit` flags and their conversion into [`AuditOptions`].

use clap::Args;

use std::time::Duration;

use super::{PolicyArgs, parse_duration};
use crate::audit::background::{
    BackgroundConfig, DEFAULT_DEBOUNCE, DEFAULT_LEASE_NAME, DEFAULT_MAX_RESULTS, ReportApi,
};
use crate::audit::page::{
    DEFAULT_MAX_LIST_PAGES, DEFAULT_MAX_OBJECT_BYTES, DEFAULT_MAX_PAGE_BYTES, ReadLimits,
};
use crate::audit::{
    AuditOptions, DEFAULT_MAX_REPORT_FINDINGS, DEFAULT_MAX_REPORT_OBJECTS, DEFAULT_PAGE_SIZE,
};
use crate::check::{FailOn, Format};

/// `stackgate audit` flags. The cluster is the kubeconfig's current context (`KUBECONFIG`,
/// `~/.kube/config`) or, inside a pod, its service account.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Output format.
    #[arg(
        long,
        env = "STACKGATE_AUDIT_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub format: Format,
    /// Which findings make the exit code 1.
    #[arg(
        long,
        env = "STACKGATE_AUDIT_FAIL_ON",
        value_enum,
        default_value = "error"
    )]
    pub fail_on: FailOn,
    /// Objects asked for per list request (`limit`); the audit holds one page at a time.
    #[arg(
        long,
        env = "STACKGATE_AUDIT_PAGE_SIZE",
        value_name = "N",
        default_value_t = DEFAULT_PAGE_SIZE,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub page_size: u32,
    /// Bytes of one list answer, at most: a page over it is asked again with half the
    /// `limit`, and a page of one object over it skips that object (named, input error).
    #[arg(long, env = "STACKGATE_AUDIT_MAX_PAGE_BYTES", value_name = "BYTES", default_value_t = DEFAULT_MAX_PAGE_BYTES, value_parser = super::parse_positive)]
    pub max_page_bytes: usize,
    /// Bytes of one object's JSON, at most: a larger object is not read (an input error
    /// names it and its size).
    #[arg(long, env = "STACKGATE_AUDIT_MAX_OBJECT_BYTES", value_name = "BYTES", default_value_t = DEFAULT_MAX_OBJECT_BYTES, value_parser = super::parse_positive)]
    pub max_object_bytes: usize,
    /// List requests per kind, at most: past it (an API server that keeps answering with a
    /// continue token) the kind is stopped with an input error.
    #[arg(long, env = "STACKGATE_AUDIT_MAX_LIST_PAGES", value_name = "N", default_value_t = DEFAULT_MAX_LIST_PAGES, value_parser = super::parse_positive)]
    pub max_list_pages: usize,
    /// Wall time of one API request, its whole answer included: a request past it stops
    /// its kind (or skips its object) with an input error. The client's own read timeout
    /// restarts with every byte, so without it an answer sent a byte at a time never ends.
    #[arg(long, env = "STACKGATE_AUDIT_REQUEST_TIMEOUT", value_name = "DURATION", default_value = REQUEST_TIMEOUT, value_parser = parse_timeout)]
    pub request_timeout: Duration,
    /// Objects the report lists one by one; the rest are counted in the summary.
    #[arg(long, env = "STACKGATE_AUDIT_MAX_REPORT_OBJECTS", value_name = "N", default_value_t = DEFAULT_MAX_REPORT_OBJECTS, value_parser = super::parse_positive)]
    pub max_report_objects: usize,
    /// Findings the report lists; the entries past it are counted in the summary.
    #[arg(long, env = "STACKGATE_AUDIT_MAX_REPORT_FINDINGS", value_name = "N", default_value_t = DEFAULT_MAX_REPORT_FINDINGS, value_parser = super::parse_positive)]
    pub max_report_findings: usize,
    /// Bytes of memory the evaluation of one object may hold (as the webhook's
    /// `--max-evaluation-memory`); past it the object is skipped with an input error.
    #[arg(long, env = "STACKGATE_AUDIT_MAX_EVALUATION_MEMORY", value_name = "BYTES", default_value_t = crate::budget::DEFAULT_MAX_EVALUATION_MEMORY, value_parser = super::parse_positive)]
    pub max_evaluation_memory: usize,
    /// Do not print fix diffs in text output.
    #[arg(long, env = "STACKGATE_AUDIT_NO_DIFF")]
    pub no_diff: bool,
    /// Text output: one line for each kind this cluster does not serve, with what it is
    /// listed for (by default they are folded into one line).
    #[arg(short, long, env = "STACKGATE_AUDIT_VERBOSE")]
    pub verbose: bool,
    /// Preview the edits the mutating webhook would make to the stored objects; with
    /// `--yes`, write them through the API (a JSON Patch with a resourceVersion
    /// precondition, field manager `stackgate-audit`). Nothing is ever restarted.
    #[arg(long, env = "STACKGATE_AUDIT_FIX")]
    pub fix: bool,
    /// With `--fix`: write the edits (without it, `--fix` only previews).
    #[arg(long, requires = "fix")]
    pub yes: bool,
    /// Read the cluster's StackgateException objects in `--exception-namespaces` and apply
    /// them: a finding one covers is reported as excepted (a warning inside its warning
    /// window). A namespace that cannot be listed, or an exception the strict parser refuses,
    /// is an input error (exit code 2); without the CRD there are none.
    #[arg(
        long = "cluster-exceptions",
        env = "STACKGATE_AUDIT_CLUSTER_EXCEPTIONS",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub cluster_exceptions: bool,
    /// The instant exceptions are judged at (RFC 3339), e.g. to see what the audit says once
    /// an exception has expired. Default: the system clock.
    #[arg(long, env = "STACKGATE_AUDIT_NOW", value_name = "RFC3339", value_parser = super::exceptions::parse_now)]
    pub now: Option<k8s_openapi::jiff::Timestamp>,
    /// Where exceptions are accepted and how long they may live.
    #[command(flatten)]
    pub exception_rules: super::ExceptionArgs,
    /// Policy source.
    #[command(flatten)]
    pub policy: PolicyArgs,
}

impl From<&AuditArgs> for AuditOptions {
    /// Every flag but the policy source, which the caller loads into the engine.
    fn from(args: &AuditArgs) -> Self {
        let AuditArgs {
            format,
            fail_on,
            page_size,
            max_page_bytes,
            max_object_bytes,
            max_list_pages,
            request_timeout,
            max_report_objects,
            max_report_findings,
            max_evaluation_memory,
            no_diff,
            verbose,
            fix,
            yes,
            cluster_exceptions,
            now,
            exception_rules,
            policy: _,
        } = args;
        AuditOptions {
            format: *format,
            fail_on: *fail_on,
            page_size: *page_size,
            no_diff: *no_diff,
            fix: *fix,
            yes: *yes,
            limits: ReadLimits {
                max_page_bytes: *max_page_bytes,
                max_object_bytes: *max_object_bytes,
                max_list_pages: *max_list_pages,
                request_timeout: *request_timeout,
            },
            max_report_objects: *max_report_objects,
            max_report_findings: *max_report_findings,
            max_evaluation_memory: *max_evaluation_memory,
            verbose: *verbose,
            exceptions: cluster_exceptions.then(|| exception_rules.rules()),
            now: *now,
        }
    }
}

/// `--request-timeout` and `--background-audit-request-timeout` default, as text
/// (`page::DEFAULT_REQUEST_TIMEOUT`).
const REQUEST_TIMEOUT: &str = "30s";
/// A request timeout: a duration over zero (a zero timeout would stop every kind at once).
fn parse_timeout(s: &str) -> Result<Duration, String> {
    let timeout = parse_duration(s)?;
    if timeout.is_zero() {
        return Err(format!("{s:?}: a request timeout must be over zero"));
    }
    Ok(timeout)
}

/// `--background-audit-period` default, as text (`background::DEFAULT_PERIOD`).
const BACKGROUND_PERIOD: &str = "10m";
/// `--background-audit-lease-duration` default, as text
/// (`background::DEFAULT_LEASE_DURATION`).
const LEASE_DURATION: &str = "60s";

/// `stackgate serve` flags of the background audit (off by default).
#[derive(Debug, Clone, Args)]
pub struct BackgroundAuditArgs {
    /// Audit the cluster in the background and publish wgpolicyk8s.io PolicyReports: one
    /// replica, elected with a coordination.k8s.io Lease, re-audits every period.
    #[arg(
        long = "background-audit",
        env = "STACKGATE_BACKGROUND_AUDIT",
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_value_t = false,
        default_missing_value = "true"
    )]
    pub enabled: bool,
    /// How often the elected replica re-audits.
    #[arg(long = "background-audit-period", env = "STACKGATE_BACKGROUND_AUDIT_PERIOD", default_value = BACKGROUND_PERIOD, value_parser = parse_duration)]
    pub period: Duration,
    /// Namespace of the Lease (the chart sets its release namespace).
    #[arg(
        long = "background-audit-lease-namespace",
        env = "STACKGATE_BACKGROUND_AUDIT_LEASE_NAMESPACE",
        default_value = "kube-system"
    )]
    pub lease_namespace: String,
    /// Name of the Lease.
    #[arg(long = "background-audit-lease-name", env = "STACKGATE_BACKGROUND_AUDIT_LEASE_NAME", default_value = DEFAULT_LEASE_NAME)]
    pub lease_name: String,
    /// How long the Lease stays held without renewal (renewed every third of it).
    #[arg(long = "background-audit-lease-duration", env = "STACKGATE_BACKGROUND_AUDIT_LEASE_DURATION", default_value = LEASE_DURATION, value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// This replica's identity in the Lease; default: the HOSTNAME environment variable
    /// (the pod name).
    #[arg(
        long = "background-audit-identity",
        env = "STACKGATE_BACKGROUND_AUDIT_IDENTITY"
    )]
    pub identity: Option<String>,
    /// Results per PolicyReport, at most (the summary still counts all).
    #[arg(long = "background-audit-max-results", env = "STACKGATE_BACKGROUND_AUDIT_MAX_RESULTS", default_value_t = DEFAULT_MAX_RESULTS, value_parser = super::parse_positive)]
    pub max_results: usize,
    /// Which report API to write: `auto` writes each of `wgpolicyk8s.io/v1alpha2`
    /// (PolicyReport) and `openreports.io/v1alpha1` (Report) that the cluster serves (API
    /// discovery), `wgpolicyk8s.io` when it serves neither.
    #[arg(
        long = "background-audit-report-api",
        env = "STACKGATE_BACKGROUND_AUDIT_REPORT_API",
        value_enum,
        default_value = "auto"
    )]
    pub report_api: ReportApi,
    /// Bytes of one list answer, at most (as `audit --max-page-bytes`).
    #[arg(long = "background-audit-max-page-bytes", env = "STACKGATE_BACKGROUND_AUDIT_MAX_PAGE_BYTES", value_name = "BYTES", default_value_t = DEFAULT_MAX_PAGE_BYTES, value_parser = super::parse_positive)]
    pub max_page_bytes: usize,
    /// Bytes of one object's JSON, at most (as `audit --max-object-bytes`).
    #[arg(long = "background-audit-max-object-bytes", env = "STACKGATE_BACKGROUND_AUDIT_MAX_OBJECT_BYTES", value_name = "BYTES", default_value_t = DEFAULT_MAX_OBJECT_BYTES, value_parser = super::parse_positive)]
    pub max_object_bytes: usize,
    /// Wall time of one API request of the audit, its whole answer included (as `audit
    /// --request-timeout`).
    #[arg(id = "background_audit_request_timeout", long = "background-audit-request-timeout", env = "STACKGATE_BACKGROUND_AUDIT_REQUEST_TIMEOUT", value_name = "DURATION", default_value = REQUEST_TIMEOUT, value_parser = parse_timeout)]
    pub request_timeout: Duration,
}

impl BackgroundAuditArgs {
    /// The background audit's settings, or None when it is off. `hostname` is the fallback
    /// identity.
    pub fn config(&self, hostname: Option<String>) -> Option<BackgroundConfig> {
        let Self {
            enabled,
            period,
            lease_namespace,
            lease_name,
            lease_duration,
            identity,
            max_results,
            report_api,
            max_page_bytes,
            max_object_bytes,
            request_timeout,
        } = self;
        enabled.then(|| BackgroundConfig {
            period: *period,
            lease_namespace: lease_namespace.clone(),
            lease_name: lease_name.clone(),
            identity: identity
                .clone()
                .or(hostname)
                .unwrap_or_else(|| format!("stackgate-{}", std::process::id())),
            lease_duration: *lease_duration,
            max_results: *max_results,
            page_size: DEFAULT_PAGE_SIZE,
            debounce: DEFAULT_DEBOUNCE,
            limits: ReadLimits {
                max_page_bytes: *max_page_bytes,
                max_object_bytes: *max_object_bytes,
                max_list_pages: DEFAULT_MAX_LIST_PAGES,
                request_timeout: *request_timeout,
            },
            report_api: *report_api,
            // serve sets them when it applies exceptions (--watch-exceptions).
            exceptions: None,
            // serve sets its own `--max-evaluation-memory` (`ServeArgs`).
            max_evaluation_memory: crate::budget::DEFAULT_MAX_EVALUATION_MEMORY,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;
    use crate::cli::tests::parse;

    fn options(argv: &[&str]) -> AuditOptions {
        match parse(argv).command {
            Command::Audit(args) => AuditOptions::from(&*args),
            other => panic!("{argv:?}: not audit: {other:?}"),
        }
    }

    #[test]
    fn audit_defaults_are_the_modules() {
        // The command reads the cluster's exceptions by default; the module (the background
        // audit, tests) only when asked.
        assert_eq!(
            options(&["stackgate", "audit"]),
            AuditOptions {
                exceptions: Some(crate::policy::exception::ExceptionRules::default()),
                ..AuditOptions::default()
            }
        );
        assert_eq!(
            options(&["stackgate", "audit", "--cluster-exceptions=false"]),
            AuditOptions::default()
        );
    }

    #[test]
    fn every_audit_flag_reaches_the_options() {
        let given = options(&[
            "stackgate",
            "audit",
            "--format=junit",
            "--fail-on=warning",
            "--page-size=7",
            "--max-page-bytes=1000",
            "--max-object-bytes=100",
            "--max-list-pages=3",
            "--request-timeout=1500ms",
            "--max-report-objects=4",
            "--max-report-findings=5",
            "--max-evaluation-memory=6",
            "--no-diff",
            "--verbose",
            "--fix",
            "--yes",
            "--now=2027-01-01T00:00:00Z",
            "--exception-namespaces=platform",
            "--exception-warn-days=2",
        ]);
        assert_eq!(
            given,
            AuditOptions {
                format: Format::Junit,
                fail_on: FailOn::Warning,
                page_size: 7,
                no_diff: true,
                fix: true,
                yes: true,
                limits: ReadLimits {
                    max_page_bytes: 1000,
                    max_object_bytes: 100,
                    max_list_pages: 3,
                    request_timeout: Duration::from_millis(1500),
                },
                max_report_objects: 4,
                max_report_findings: 5,
                max_evaluation_memory: 6,
                verbose: true,
                exceptions: Some(crate::policy::exception::ExceptionRules {
                    namespaces: vec!["platform".to_owned()],
                    warn_within: k8s_openapi::jiff::SignedDuration::from_hours(48),
                    ..crate::policy::exception::ExceptionRules::default()
                }),
                now: Some("2027-01-01T00:00:00Z".parse().unwrap()),
            }
        );
    }

    #[test]
    fn background_audit_is_off_by_default_and_its_defaults_are_the_modules() {
        use crate::audit::background::{DEFAULT_LEASE_DURATION, DEFAULT_PERIOD};
        let Command::Serve(args) = parse(&["stackgate", "serve"]).command else {
            panic!("serve");
        };
        assert_eq!(args.background_audit.config(None), None);
        let Command::Serve(args) = parse(&["stackgate", "serve", "--background-audit"]).command
        else {
            panic!("serve");
        };
        let config = args
            .background_audit
            .config(Some("stackgate-0".to_owned()))
            .expect("on");
        assert_eq!(config.period, DEFAULT_PERIOD);
        assert_eq!(config.lease_duration, DEFAULT_LEASE_DURATION);
        assert_eq!(config.lease_name, DEFAULT_LEASE_NAME);
        assert_eq!(config.max_results, DEFAULT_MAX_RESULTS);
        assert_eq!(config.identity, "stackgate-0");
        assert_eq!(config.limits, ReadLimits::default());
        assert_eq!(config.report_api, ReportApi::Auto);
    }

    #[test]
    fn a_zero_request_timeout_is_refused() {
        use clap::Parser as _;
        for argv in [
            ["stackgate", "audit", "--request-timeout=0s"],
            [
                "stackgate",
                "serve",
                "--background-audit-request-timeout=0ms",
            ],
        ] {
            let error = crate::cli::Cli::try_parse_from(argv).expect_err("refused");
            assert!(error.to_string().contains("must be over zero"), "{error}");
        }
        let Command::Serve(args) = parse(&[
            "stackgate",
            "serve",
            "--background-audit",
            "--background-audit-request-timeout=2s",
        ])
        .command
        else {
            panic!("serve");
        };
        let config = args.background_audit.config(None).expect("on");
        assert_eq!(config.limits.request_timeout, Duration::from_secs(2));
    }

    #[test]
    fn yes_needs_fix() {
        use clap::Parser as _;
        assert!(crate::cli::Cli::try_parse_from(["stackgate", "audit", "--yes"]).is_err());
    }
}
