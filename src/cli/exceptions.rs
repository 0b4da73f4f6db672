//! The `StackgateException` settings every face shares (`check`, `serve`, `audit`): where
//! exceptions are accepted, how long they may live, when they count as expiring, and the
//! instant a face judges them at.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::policy::exception::{
    DEFAULT_MAX_LIFETIME_DAYS, DEFAULT_NAMESPACE, DEFAULT_WARN_DAYS, ExceptionRules,
};

/// Where exceptions are accepted and how long they may live (the chart's `exceptions.*`).
#[derive(Debug, Clone, Args)]
pub struct ExceptionArgs {
    /// Namespaces a StackgateException is accepted in (the chart: `exceptions.namespaces`,
    /// default the release namespace). An exception elsewhere is refused (`check`) or ignored
    /// and logged (`serve`, `audit`). Repeatable; the environment variable takes a
    /// comma-separated list.
    #[arg(
        long = "exception-namespaces",
        env = "STACKGATE_EXCEPTION_NAMESPACES",
        value_name = "NAMESPACE",
        value_delimiter = ',',
        default_value = DEFAULT_NAMESPACE
    )]
    pub namespaces: Vec<String>,
    /// The longest an exception may live, in days, from its creation (a file: from now) to
    /// its `expires`; a longer one is refused.
    #[arg(
        long = "exception-max-lifetime-days",
        env = "STACKGATE_EXCEPTION_MAX_LIFETIME_DAYS",
        value_name = "DAYS",
        default_value_t = DEFAULT_MAX_LIFETIME_DAYS,
        value_parser = clap::value_parser!(i64).range(1..=3650)
    )]
    pub max_lifetime_days: i64,
    /// Days before its `expires` from which an exception is reported as expiring (a warning
    /// on each write it admits, in `check` and `audit`, and the metric's `expiring` state).
    #[arg(
        long = "exception-warn-days",
        env = "STACKGATE_EXCEPTION_WARN_DAYS",
        value_name = "DAYS",
        default_value_t = DEFAULT_WARN_DAYS,
        value_parser = clap::value_parser!(i64).range(0..=3650)
    )]
    pub warn_days: i64,
    /// Whether an exception must carry `expires` (the chart: `exceptions.requireExpiry`). With
    /// `false`, one without it never expires (listed as "no expiry") and nothing warns before
    /// it ends; one with it is still held to `--exception-max-lifetime-days`. The default
    /// keeps every exception temporary: an exception nobody reviews stays off a guardrail
    /// for good.
    #[arg(
        long = "exception-require-expiry",
        env = "STACKGATE_EXCEPTION_REQUIRE_EXPIRY",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub require_expiry: bool,
}

impl ExceptionArgs {
    /// The rules these flags give.
    pub fn rules(&self) -> ExceptionRules {
        ExceptionRules {
            namespaces: self.namespaces.clone(),
            expires_required: self.require_expiry,
            max_lifetime: SignedDuration::from_hours(24 * self.max_lifetime_days),
            warn_within: SignedDuration::from_hours(24 * self.warn_days),
        }
    }
}

/// `stackgate exceptions`.
#[derive(Debug, Clone, Args)]
pub struct ExceptionsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ExceptionsCommand,
}

/// `stackgate exceptions` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum ExceptionsCommand {
    /// List StackgateExceptions with their state (active, expiring with the days left,
    /// expired, invalid with the reason), from the cluster or from files.
    List(ExceptionsListArgs),
}

/// How `stackgate exceptions list` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ListFormat {
    /// A table.
    Text,
    /// One JSON document.
    Json,
}

/// `stackgate exceptions list` flags.
#[derive(Debug, Clone, Args)]
pub struct ExceptionsListArgs {
    /// A StackgateException file or directory (`*.yaml`, `*.yml`) to list instead of the
    /// cluster's `--exception-namespaces`.
    #[arg(long, value_name = "PATH")]
    pub from: Option<PathBuf>,
    /// The instant states are computed at (RFC 3339). Default: the system clock.
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub now: Option<Timestamp>,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: ListFormat,
    /// Where exceptions are accepted and how long they may live.
    #[command(flatten)]
    pub exception_rules: ExceptionArgs,
    /// Policy source (exceptions name policies of this set).
    #[command(flatten)]
    pub policy: super::PolicyArgs,
}

/// Parses `--now`: an RFC 3339 instant with an offset.
pub fn parse_now(text: &str) -> Result<Timestamp, String> {
    text.parse::<Timestamp>()
        .map_err(|e| format!("{text:?} is not an RFC 3339 time with an offset: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_rfc3339_with_an_offset() {
        assert_eq!(
            parse_now("2026-12-01T00:00:00Z").unwrap().to_string(),
            "2026-12-01T00:00:00Z"
        );
        let e = parse_now("2026-12-01").unwrap_err();
        assert!(e.contains("not an RFC 3339 time"), "{e}");
    }
}
