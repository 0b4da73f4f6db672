//! Logging set-up: text or JSON lines on stderr, filtered by `--log-level` (an `EnvFilter`
//! directive such as `info` or `stackgate=debug,warn`), written in batches by a thread of
//! their own (`log_writer`).
//!
//! What is logged is decided where events are emitted: identifiers (uid, kind, namespace,
//! name, policy, line), never object contents.

use std::fmt::{self, Write as _};
use std::io::IsTerminal as _;
use std::time::Duration;

use crate::json_text;
use crate::log_writer::{LogWriter, Pacing};
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
    /// The thread that writes log lines could not be started.
    #[error("the log writer thread could not be started: {0}")]
    Writer(#[source] std::io::Error),
}

/// How long dropping [`Logs`] waits for the lines logged before it to be written.
const FLUSH_AT_EXIT: Duration = Duration::from_secs(2);

/// The installed logging: dropping it writes the lines still waiting (up to two seconds, in
/// case stderr is blocked) and stops the writer thread. Held by `main` for the process's life.
#[derive(Debug)]
#[must_use = "dropping it stops the batched writer; hold it until the process ends"]
pub struct Logs(LogWriter);

impl Logs {
    /// Waits until every line logged so far is on stderr (at most two seconds); for lines
    /// that must come before something written to stderr directly.
    pub fn flush(&self) {
        let _ = self.0.flush(FLUSH_AT_EXIT);
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        let _ = self.0.close(FLUSH_AT_EXIT);
    }
}

/// Installs the global subscriber, writing through a [`LogWriter`] over stderr.
pub fn init(format: LogFormat, directive: &str) -> Result<Logs, TelemetryError> {
    let filter = EnvFilter::try_new(directive).map_err(|source| TelemetryError::Filter {
        directive: directive.to_owned(),
        source,
    })?;
    let writer =
        LogWriter::spawn(std::io::stderr(), Pacing::DEFAULT).map_err(TelemetryError::Writer)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer.clone());
    let result = match format {
        LogFormat::Text => builder.try_init(),
        // JSON escapes control characters itself: no ANSI colours (what `.json()` sets).
        LogFormat::Json => builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines::new(UtcMicros))
            .try_init(),
    };
    match result {
        Ok(()) => Ok(Logs(writer)),
        Err(_) => {
            // Nothing will log through it: stop its thread.
            let _ = writer.close(Duration::ZERO);
            Err(TelemetryError::AlreadyInstalled)
        }
    }
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
        // The line is put together in a `String` of its own and handed to the writer once:
        // one `dyn` write per line instead of one per piece.
        let mut line = String::with_capacity(LINE_CAPACITY);
        let mut timestamp = String::new();
        self.timer.format_time(&mut Writer::new(&mut timestamp))?;
        line.push_str("{\"timestamp\":");
        json_text::push_quoted(&mut line, &timestamp);
        line.push_str(",\"level\":\"");
        line.push_str(meta.level().as_str());
        line.push('"');
        let mut fields = JsonFieldsVisitor {
            out: &mut line,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        line.push_str(",\"target\":");
        json_text::push_quoted(&mut line, meta.target());
        line.push_str("}\n");
        writer.write_str(&line)
    }
}

/// The time as tracing-subscriber's `SystemTime` timer writes it (RFC 3339 in UTC, to the
/// microsecond: `2026-11-29T05:17:38.123456Z`), its digits written directly rather than
/// through seven padded `fmt` integers: the timestamp was the costliest field of the line
/// every patched review writes. Times its fixed width cannot hold (before 1970, after 9999)
/// are the stock timer's.
#[derive(Debug, Clone, Copy, Default)]
struct UtcMicros;

impl FormatTime for UtcMicros {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        match rfc3339_micros(std::time::SystemTime::now()) {
            Some(text) => w.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?),
            None => SystemTime.format_time(w),
        }
    }
}

/// `time` as `YYYY-MM-DDTHH:MM:SS.uuuuuuZ`, or None outside 1970–9999.
fn rfc3339_micros(time: std::time::SystemTime) -> Option<[u8; 27]> {
    let since = time.duration_since(std::time::UNIX_EPOCH).ok()?;
    let seconds = since.as_secs();
    let (year, month, day) = civil_date(seconds / 86_400);
    if year > 9999 {
        return None;
    }
    let of_day = seconds % 86_400;
    let mut out = *b"0000-00-00T00:00:00.000000Z";
    let mut digits = |at: usize, width: usize, mut value: u64| {
        for i in (at..at + width).rev() {
            // `value % 10` is one digit.
            out[i] = b'0' + u8::try_from(value % 10).unwrap_or(0);
            value /= 10;
        }
    };
    digits(0, 4, year);
    digits(5, 2, month);
    digits(8, 2, day);
    digits(11, 2, of_day / 3600);
    digits(14, 2, of_day / 60 % 60);
    digits(17, 2, of_day % 60);
    digits(20, 6, u64::from(since.subsec_micros()));
    Some(out)
}

/// The proleptic Gregorian (year, month, day) of `days` days after 1970-01-01: days counted
/// in 400-year eras from 0000-03-01, whose leap day is then the last day of its year.
fn civil_date(days: u64) -> (u64, u64, u64) {
    let from_march_0000 = days + 719_468;
    let era = from_march_0000 / 146_097;
    let day_of_era = from_march_0000 % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// Writes each field as `,"name":value`, as `tracing_serde::SerdeMapVisitor` serializes it:
/// booleans and integers as JSON numbers, floats as `serde_json` writes them, text as a JSON
/// string, anything else (the `Visit` defaults route through `record_debug`) as the string of
/// its `Debug` form.
struct JsonFieldsVisitor<'a> {
    out: &'a mut String,
    result: fmt::Result,
}

impl JsonFieldsVisitor<'_> {
    fn entry(&mut self, field: &Field, value: impl FnOnce(&mut String) -> fmt::Result) {
        if self.result.is_ok() {
            self.out.push(',');
            json_text::push_quoted(self.out, field.name());
            self.out.push(':');
            self.result = value(self.out);
        }
    }
}

impl Visit for JsonFieldsVisitor<'_> {
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
        self.entry(field, |out| {
            json_text::push_quoted(out, value);
            Ok(())
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field, |out| {
            out.push('"');
            write!(JsonEscaped(out), "{value:?}")?;
            out.push('"');
            Ok(())
        });
    }
}

/// What a line is made with room for: a review's line is about 300 bytes.
const LINE_CAPACITY: usize = 512;

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

    /// Every day from 1970 to 9999 against a calendar counted a day at a time.
    #[test]
    fn civil_dates_are_the_calendar_counted_day_by_day() {
        let (mut year, mut month, mut day) = (1970u64, 1u64, 1u64);
        let leap =
            |y: u64| (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400);
        for days in 0..2_932_897u64 {
            assert_eq!(civil_date(days), (year, month, day), "day {days}");
            let length = match month {
                2 if leap(year) => 29,
                2 => 28,
                4 | 6 | 9 | 11 => 30,
                _ => 31,
            };
            day += 1;
            if day > length {
                day = 1;
                month += 1;
                if month > 12 {
                    month = 1;
                    year += 1;
                }
            }
        }
        assert_eq!((year, month, day), (10_000, 1, 1));
    }

    /// The same text as the stock timer, at fixed instants and now.
    #[test]
    fn utc_micros_writes_what_the_stock_timer_writes() {
        let at = |seconds: u64, micros: u32| {
            let time = std::time::UNIX_EPOCH
                + std::time::Duration::from_secs(seconds)
                + std::time::Duration::from_micros(u64::from(micros));
            rfc3339_micros(time).map(|t| String::from_utf8(t.to_vec()).unwrap())
        };
        assert_eq!(at(0, 0).as_deref(), Some("1970-01-01T00:00:00.000000Z"));
        assert_eq!(
            at(951_782_400, 7).as_deref(),
            Some("2000-02-29T00:00:00.000007Z")
        );
        assert_eq!(
            at(1_795_835_858, 123_456).as_deref(),
            Some("2026-11-28T03:17:38.123456Z")
        );
        assert_eq!(
            at(253_402_300_799, 999_999).as_deref(),
            Some("9999-12-31T23:59:59.999999Z")
        );
        assert_eq!(at(253_402_300_800, 0), None);
        let stock = || {
            let mut text = String::new();
            SystemTime.format_time(&mut Writer::new(&mut text)).unwrap();
            text
        };
        for _ in 0..100 {
            let before = stock();
            let mut ours = String::new();
            UtcMicros.format_time(&mut Writer::new(&mut ours)).unwrap();
            let after = stock();
            // Fixed-width UTC text sorts as time does.
            assert_eq!(ours.len(), before.len());
            assert!(before <= ours && ours <= after, "{before} {ours} {after}");
        }
    }

    #[test]
    fn error_chain_joins_every_source() {
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&error), "outer: inner");
        assert_eq!(error_chain(&std::io::Error::other("alone")), "alone");
    }
}
