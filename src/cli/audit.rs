//! `stackgate audit` flags and their conversion into [`AuditOptions`].

use clap::Args;

use super::PolicyArgs;
use crate::audit::{AuditOptions, DEFAULT_PAGE_SIZE};
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
    /// Do not print fix diffs in text output.
    #[arg(long, env = "STACKGATE_AUDIT_NO_DIFF")]
    pub no_diff: bool,
    /// Preview the edits the mutating webhook would make to the stored objects; with
    /// `--yes`, write them through the API (a JSON Patch with a resourceVersion
    /// precondition, field manager `stackgate-audit`). Nothing is ever restarted.
    #[arg(long, env = "STACKGATE_AUDIT_FIX")]
    pub fix: bool,
    /// With `--fix`: write the edits (without it, `--fix` only previews).
    #[arg(long, requires = "fix")]
    pub yes: bool,
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
            no_diff,
            fix,
            yes,
            policy: _,
        } = args;
        AuditOptions {
            format: *format,
            fail_on: *fail_on,
            page_size: *page_size,
            no_diff: *no_diff,
            fix: *fix,
            yes: *yes,
        }
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
        assert_eq!(options(&["stackgate", "audit"]), AuditOptions::default());
    }

    #[test]
    fn every_audit_flag_reaches_the_options() {
        let given = options(&[
            "stackgate",
            "audit",
            "--format=junit",
            "--fail-on=warning",
            "--page-size=7",
            "--no-diff",
            "--fix",
            "--yes",
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
            }
        );
    }

    #[test]
    fn yes_needs_fix() {
        use clap::Parser as _;
        assert!(crate::cli::Cli::try_parse_from(["stackgate", "audit", "--yes"]).is_err());
    }
}
