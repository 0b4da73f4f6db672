//! `cloud-config-integrity`: what makes the CCM fail at start, and what it silently ignores.
//!
//! Facts (domain-facts §1.2, §2): the CCM reads its config with gcfg v1.2.3 through
//! `gcfg.FatalOnly(gcfg.ReadInto(..))`. Syntax errors, invalid bool literals, `key=` on a bool,
//! durations without a unit and non-integers on int keys are fatal: the CCM exits at start.
//! Unknown sections and keys are "extra data" that `FatalOnly` drops without a word.
//! An unquoted `;` or `#` starts a comment, so the value is silently cut there (CPO PR #1960).

use super::credentials::CREDENTIAL_KEYS;
use super::{ConfigView, RuleOutput, Severity, Unreadable, Violation};
use crate::cloudconf::schema::{self, IgnoredReason};

/// gcfg's syntax error for a `_` in a section or variable name.
const UNDERSCORE: &str = "illegal character U+005F";

/// Runs the rule on one cloud config.
pub fn check(view: &ConfigView<'_>) -> RuleOutput {
    let mut out = RuleOutput::default();
    let doc = match &view.doc {
        Ok(doc) => *doc,
        Err(why) => {
            let fix = match why {
                Unreadable::Parse(e) if e.message == UNDERSCORE => {
                    "gcfg does not allow '_' in section or key names, and the CCM's keys are \
                     written with '-': replace '_' with '-' (e.g. lb-method, not lb_method)"
                }
                _ => "Fix the line named here",
            };
            out.violations.push(Violation {
                severity: Severity::Deny,
                line: why.line(),
                message: format!(
                    "{why}; the CCM would fail to start (\"failed to read config\"). {fix}"
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
        // The suggestion comes first: clients show warnings cut to a few hundred characters.
        let what = name(&ignored.section, ignored.key.as_deref());
        let mut message = match &ignored.suggestion {
            Some(s) => {
                let unknown = if ignored.key.is_some() {
                    "key"
                } else {
                    "section"
                };
                format!("{what}: did you mean `{s}`? Unknown {unknown}, silently ignored")
            }
            None => format!("{what}: {why}; it is silently ignored"),
        };
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
