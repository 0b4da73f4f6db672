//! Lossless reader/editor for the OpenStack CCM's cloud config (gcfg INI dialect) and the CCM's
//! value semantics.
//!
//! * [`Document`] parses exactly what gcfg v1.2.3 (the CCM's parser, via `gcfg.ReadInto`)
//!   accepts, keeps every byte, answers gcfg's questions (effective value, multi-valued keys)
//!   and edits values while leaving every other byte untouched.
//! * [`check`] applies the CCM's config schema: what makes the CCM exit at start, what it
//!   silently ignores (unknown sections and keys, with "did you mean" suggestions), and the
//!   effective `[LoadBalancer] provider-requires-serial-api-calls`.
//!
//! Messages never contain values (they can be credentials): errors and findings name line,
//! column, section and key only. `Debug` output of documents and entries is redacted.
//!
//! The behaviour is checked against the real gcfg by `tests/gcfg_differential.rs`.
//!
//! Character classes (`unicode.IsLetter` / `unicode.IsDigit` for names) and case folding
//! (`strings.EqualFold`) use tables generated from Go 1.19, i.e. Unicode [`UNICODE_VERSION`]
//! (13.0.0), the Go the oracle is built with. A CCM built with Go >= 1.21 uses Unicode 15.0: a
//! letter added in Unicode 14/15 inside a section or key name is accepted by such a CCM but
//! rejected here. Regenerate the tables with a newer Go to follow (see `tests/gcfg-oracle`).

mod document;
mod gotypes;
mod scanner;
pub mod schema;
mod unicode;
mod unicode_tables;

#[cfg(test)]
mod tests;

pub(crate) use document::EntryRef;
pub use document::{
    Document, EditError, EditKind, EditSummary, Entry, ParseError, SectionHeader, parse_bool,
};
pub use gotypes::{DurationError, IntError, parse_gcfg_int, parse_go_duration};
pub use schema::{
    CcmReport, Ignored, IgnoredReason, Problem, ProblemKind, ValueType, check, would_start,
};
pub(crate) use unicode::FoldName;
pub use unicode::eq_fold;

/// Unicode version of the character tables used for gcfg identifiers and case folding (those of
/// the Go release the tables were generated from).
pub const UNICODE_VERSION: &str = unicode_tables::UNICODE_VERSION;

/// An edit a rule wants (applied with [`Document::set`]): set `key = value` in the plain section `section`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IniEdit {
    /// Section name, e.g. `LoadBalancer`.
    pub section: &'static str,
    /// Key name.
    pub key: &'static str,
    /// Literal value (never secret).
    pub value: &'static str,
}
