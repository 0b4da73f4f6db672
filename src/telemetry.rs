//! Logging set-up: text or JSON lines on stderr, filtered by `--log-level` (an `EnvFilter`
//! directive such as `info` or `stackgate=debug,warn`).
//!
//! What is logged is decided where events are emitted: identifiers (uid, kind, namespace,
//! name, policy, line), never object contents.

use std::fmt::{self, Write as _};
use std::io::IsTerminal as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

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
        // JSON escapes control characters itself: no ANSI colours (what `.json()` sets).
        LogFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines::new(SystemTime))
            .try_init(),
    };
    result.map_err(|_| TelemetryError::AlreadyInstalled)
}

/// The JSON log line: tracing-subscriber's own format (`.json().flatten_event(true)
/// .with_current_span(true)`), written directly for an event outside any span. Its own
/// formatter serializes each field through `serde_json` into an `io::Write` adaptor that
/// checks UTF-8 on every write, about 25,000 instructions for a review's line (a fifth of what
/// the noop webhook spends on a whole review, BENCHMARKS.md); this writes the same bytes in a
/// fraction of that. Events inside a span (whose fields the stock formatter keeps as JSON
/// text in the span's extensions) and events from the `log` crate (whose metadata the stock
/// formatter normalises) are handed to the stock formatter, so every line is its line.
struct JsonLines<T> {
    timer: T,
    stock: Format<Json, T>,
}

impl<T: FormatTime + Clone> JsonLines<T> {
    fn new(timer: T) -> Self {
        let stock = tracing_subscriber::fmt::format()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_timer(timer.clone());
        Self { timer, stock }
    }
}

impl<S, N, T> FormatEvent<S, N> for JsonLines<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'w> FormatFields<'w> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let in_span = event
            .parent()
            .and_then(|id| ctx.span(id))
            .or_else(|| ctx.lookup_current())
            .is_some();
        // tracing-log's events carry their origin in `log.*` fields.
        if in_span || meta.fields().field("log.target").is_some() {
            return self.stock.format_event(ctx, writer, event);
        }
        let mut timestamp = String::new();
        self.timer.format_time(&mut Writer::new(&mut timestamp))?;
        writer.write_str("{\"timestamp\":")?;
        write_json_str(&mut writer, &timestamp)?;
        writer.write_str(",\"level\":\"")?;
        writer.write_str(meta.level().as_str())?;
        writer.write_char('"')?;
        let mut fields = JsonFieldsVisitor {
            out: &mut writer,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        writer.write_str(",\"target\":")?;
        write_json_str(&mut writer, meta.target())?;
        writer.write_str("}\n")
    }
}

/// Writes each field as `,"name":value`, as `tracing_serde::SerdeMapVisitor` serializes it:
/// booleans and integers as JSON numbers, floats as `serde_json` writes them, text as a JSON
/// string, anything else (the `Visit` defaults route through `record_debug`) as the string of
/// its `Debug` form.
struct JsonFieldsVisitor<'a, 'w> {
    out: &'a mut Writer<'w>,
    result: fmt::Result,
}

impl JsonFieldsVisitor<'_, '_> {
    fn entry(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_ok() {
            self.result = self
                .out
                .write_char(',')
                .and_then(|()| write_json_str(self.out, field.name()))
                .and_then(|()| self.out.write_char(':'))
                .and_then(|()| value(self.out));
        }
    }
}

impl Visit for JsonFieldsVisitor<'_, '_> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field, |out| {
            out.write_str(if value { "true" } else { "false" })
        });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.entry(field, |out| write!(out, "{value}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.entry(field, |out| write!(out, "{value}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.entry(field, |out| {
            out.write_str(&serde_json::to_string(&value).map_err(|_| fmt::Error)?)
        });
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.entry(field, |out| write_json_str(out, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field, |out| {
            out.write_char('"')?;
            write!(JsonEscaped(out), "{value:?}")?;
            out.write_char('"')
        });
    }
}

/// `text` as a JSON string, quoted.
fn write_json_str(out: &mut dyn fmt::Write, text: &str) -> fmt::Result {
    out.write_char('"')?;
    JsonEscaped(out).write_str(text)?;
    out.write_char('"')
}

/// Escapes what it is given as `serde_json` escapes a string's contents
/// ([`crate::json_text`]): a `Debug` or `Display` form is written through this in pieces.
struct JsonEscaped<'a>(&'a mut dyn fmt::Write);

impl fmt::Write for JsonEscaped<'_> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        crate::json_text::write_escaped(self.0, text)
    }
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

    /// A clock that always says the same, with a character JSON must escape.
    #[derive(Clone)]
    struct Fixed;

    impl FormatTime for Fixed {
        fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
            w.write_str("2026-11-29T05:17:38.123456Z\"")
        }
    }

    #[derive(Clone, Default)]
    struct Capture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Emits events of every field type, level and escape, outside and inside spans.
    fn emit_everything() {
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        let unicode = "K\u{212a}ſ \u{2028}\u{2029} é 日本 \u{1f600} \u{7f}";
        let error = std::io::Error::other("broken \"pipe\"\n");
        tracing::info!(
            webhook = "mutate",
            uid = %"u-1",
            kind = %ShortTextLike("ConfigMap"),
            dry_run = false,
            status = 200u16,
            delta = -7i64,
            big = u64::MAX,
            wide = i128::MIN,
            ratio = 0.1f64,
            huge = 1e300f64,
            nan = f64::NAN,
            infinite = f64::INFINITY,
            debug = ?vec!["a\"b", "c"],
            every = every_ascii.as_str(),
            unicode,
            error = &error as &dyn std::error::Error,
            "review answered"
        );
        tracing::warn!("a message with {} and \"quotes\" \\ {:?}", "args", 'x');
        tracing::error!(every = %every_ascii);
        tracing::debug!(n = 1, "debug");
        tracing::trace!("trace");
        tracing::info!(target: "some::other \"target\"", "elsewhere");
        tracing::info!(message = "explicit", extra = true);
        let outer = tracing::info_span!("review", uid = "u-2", name = tracing::field::Empty);
        let _outer = outer.enter();
        outer.record("name", "cm \"x\"");
        tracing::info!(policy = "p", "inside a span");
        let inner = tracing::debug_span!("inner", depth = 2);
        let _inner = inner.enter();
        tracing::warn!("inside two spans");
    }

    struct ShortTextLike(&'static str);

    impl fmt::Display for ShortTextLike {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    #[test]
    fn json_lines_are_the_stock_json_formatters_lines() {
        let stock = Capture::default();
        let ours = Capture::default();
        let stock_writer = stock.clone();
        let stock_subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || stock_writer.clone())
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_timer(Fixed)
            .finish();
        tracing::subscriber::with_default(stock_subscriber, emit_everything);
        let our_writer = ours.clone();
        let our_subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || our_writer.clone())
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines::new(Fixed))
            .finish();
        tracing::subscriber::with_default(our_subscriber, emit_everything);
        let stock =
            String::from_utf8(stock.0.lock().expect("not poisoned").clone()).expect("utf-8");
        let ours = String::from_utf8(ours.0.lock().expect("not poisoned").clone()).expect("utf-8");
        assert_eq!(stock.lines().count(), 9, "{stock}");
        for (theirs, mine) in stock.lines().zip(ours.lines()) {
            assert_eq!(mine, theirs);
            serde_json::from_str::<serde_json::Value>(mine).expect("each line is JSON");
        }
        assert_eq!(ours, stock);
    }

    #[test]
    fn error_chain_joins_every_source() {
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&error), "outer: inner");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }
}
