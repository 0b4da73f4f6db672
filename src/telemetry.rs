//! Logging set-up: text or JSON lines on stderr, filtered by `--log-level` (an `EnvFilter`
//! directive such as `info` or `stackgate=debug,warn`).
//!
//! What is logged is decided where events are emitted: identifiers (uid, kind, namespace,
//! name, policy, line), never object contents.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Why logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The filter directive does not parse.
    #[error("--log-level {directive:?} is not a valid filter: {source}")]
    Filter {
        /// The directive given.
        directive: String,
        /// Parser error.
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber was already installed.
    #[error("a log subscriber is already installed")]
    AlreadyInstalled,
}

/// Installs the global subscriber.
pub fn init(format: LogFormat, directive: &str) -> Result<(), TelemetryError> {
    let filter = EnvFilter::try_new(directive).map_err(|source| TelemetryError::Filter {
        directive: directive.to_owned(),
        source,
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
    result.map_err(|_| TelemetryError::AlreadyInstalled)
}

/// An error and its sources as one line (`a: b: c`), for log fields and for reasons shown
/// to users. Shared by the server and the guard; it lives here, in the lowest module, so
/// that neither has to import the other.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn error_chain_joins_every_source() {
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&error), "outer: inner");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }
}
