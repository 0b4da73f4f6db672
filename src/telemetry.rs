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
