//! `cloud-config-integrity`: what makes the CCM fail at start, and what it silently ignores.
//!
//! Facts (domain-facts §1.2, §2): the CCM reads its config with gcfg v1.2.3 through
//! `gcfg.FatalOnly(gcfg.ReadInto(..))`. Syntax errors, invalid bool literals, `key=` on a bool,
//! durations without a unit and non-integers on int keys are fatal: the CCM exits at start.
//! Unknown sections and keys are "extra data" that `FatalOnly` drops without a word.
//! An unquoted `;` or `#` starts a comment, so the value is silently cut there (CPO PR #1960).

use super::credentials::CREDENTIAL_KEYS;
use super::{ConfigView, RuleOutput, Severity, Violation};
use crate::cloudconf::schema::{self, IgnoredReason};

/// Runs the rule on one cloud config.
pub fn check(view: &ConfigView<'_>) -> RuleOutput {
    let mut out = RuleOutput::default();
    let doc = match &view.doc {
        Ok(doc) => *doc,
        Err(why) => {
            out.violations.push(Violation {
                severity: Severity::Deny,
                line: why.line(),
                message: format!(
                    "{why}; the CCM would fail to start (\"failed to read config\"). Fix the line \
                     named here"
                ),
                fixed_by_edit: false,
            });
            return out;
        }
    };
    let report = schema::check(doc);
    for p in &report.fatal {
        out.violations.push(Violation {
            severity: Severity::Deny,
            line: Some(p.line),
            message: format!(
                "{}: {}; the CCM would fail to start on this file",
                name(&p.section, p.key.as_deref()),
                p.message
            ),
            fixed_by_edit: false,
        });
    }
    for ignored in &report.ignored {
        let why = match ignored.reason {
            IgnoredReason::UnknownSection => "the CCM does not read this section",
            IgnoredReason::UnknownKey => "the CCM does not know this key",
            IgnoredReason::SubsectionNotAllowed => {
                "this section takes no subsections, so the CCM skips this header and its keys"
            }
            IgnoredReason::RemovedKey => "the CCM no longer reads this key",
        };
        let mut message = format!(
            "{}: {why}; it is silently ignored",
            name(&ignored.section, ignored.key.as_deref())
        );
        if let Some(s) = &ignored.suggestion {
            message.push_str(&format!(". Did you mean `{s}`?"));
        }
        if let Some(note) = &ignored.note {
            message.push_str(&format!(" ({note})"));
        }
        out.violations.push(Violation {
            severity: Severity::Warn,
            line: Some(ignored.line),
            message,
            fixed_by_edit: false,
        });
    }
    for entry in doc.entries().filter(|e| e.has_truncating_comment) {
        let credential = CREDENTIAL_KEYS
            .iter()
            .any(|k| k.eq_ignore_ascii_case(entry.key));
        let what = if credential {
            "this credential value contains an unquoted ';' or '#' (the value is not shown); the CCM \
             cuts it there and authenticates with the truncated string"
                .to_owned()
        } else {
            "the value contains an unquoted ';' or '#', which starts a comment: the CCM cuts the \
             value there"
                .to_owned()
        };
        out.violations.push(Violation {
            severity: Severity::Warn,
            line: Some(entry.line),
            message: format!(
                "{}: {what}. Fix: wrap the value in double quotes",
                name(entry.section, Some(entry.key))
            ),
            fixed_by_edit: false,
        });
    }
    out
}

fn name(section: &str, key: Option<&str>) -> String {
    match key {
        Some(key) => format!("[{section}] {key}"),
        None => format!("[{section}]"),
    }
}
