//! `serial-lb-api-calls`: every CCM cloud config carries
//! `[LoadBalancer] provider-requires-serial-api-calls = true`.
//!
//! Facts (domain-facts §1.1): the key is a gcfg bool in `[LoadBalancer]`, default false,
//! added in CCM v1.28.0 (cloud-provider-openstack PR #2314). With it false the CCM creates
//! fully-populated load balancers and batch-replaces pool members; providers that cannot do
//! that answer 503 or leave objects in immutable PENDING_* states, on which Octavia answers
//! 409 to every further call.

use super::{Check, Example, Family, NoParams, RuleId, parse_params};
use super::{ConfigView, IniEdit, RuleOutput, Severity, Violation};
use crate::cloudconf::parse_bool;

/// The family: reads each cloud config, adds the key where it is missing.
pub static FAMILY: Family = Family {
    id: RuleId::new("serial-lb-api-calls"),
    check: Check::CloudConfig(|view, _, _| check(view)),
    facts: &[],
    params: &[],
    parse_params: parse_params::<NoParams>,
    codes: &[CODE_UNREADABLE, CODE_MISSING, CODE_FALSE, CODE_INVALID],
    example: || {
        Some(Example::cloud_config(
            "[Global]\nregion = RegionOne\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
        ))
    },
    embedded: false,
    default_policy: (
        "serial-lb-api-calls.yaml",
        include_str!("../../policies/serial-lb-api-calls.yaml"),
    ),
};

/// The cloud config cannot be read or parsed, so the key cannot be verified.
pub const CODE_UNREADABLE: &str = "unreadable";
/// The key is not set (the CCM's default is false); the edit adds it.
pub const CODE_MISSING: &str = "missing";
/// The key is set to a false value.
pub const CODE_FALSE: &str = "false";
/// The value is not a boolean the CCM accepts.
pub const CODE_INVALID: &str = "invalid";

// The section, the key and the reason as literals, so that the texts of a missing key are
// joined at compile time (`concat!`) rather than on every review of a config without it.
macro_rules! section {
    () => {
        "LoadBalancer"
    };
}
macro_rules! key {
    () => {
        "provider-requires-serial-api-calls"
    };
}
macro_rules! why {
    () => {
        "Without serial calls the CCM sends fully-populated load-balancer creates and \
batch member updates, which Octavia providers race on (409 \"immutable\", objects stuck in PENDING_*)."
    };
}

/// Section of the key.
pub const SECTION: &str = section!();
/// The key.
pub const KEY: &str = key!();

const WHY: &str = why!();

/// What a config without the key is told ([`CODE_MISSING`]).
const MISSING_WHAT: &str = concat!("[", section!(), "] ", key!(), " is not set (default false)");
/// Why it matters, for a config without the key.
const MISSING_WHY: &str = concat!(
    why!(),
    " Add `",
    key!(),
    " = true` under [",
    section!(),
    "] (the stackgate mutating webhook adds it where it may edit the object)."
);
/// What one values source of a release without the key is told.
const MISSING_IN_VALUES_WHAT: &str =
    concat!("[", section!(), "] ", key!(), " is not set in these values");
/// Why it matters, for one values source of a release without the key.
const MISSING_IN_VALUES_WHY: &str = concat!(
    "These values are one values source of the release: unless another values source or \
     spec.values of the same release sets it, which this object does not show, the CCM uses \
     its default (false). ",
    why!(),
    " Add `",
    key!(),
    " = true` under [",
    section!(),
    "] here (the stackgate mutating webhook adds it where it may edit the object)."
);

/// Runs the rule on one cloud config.
pub fn check(view: &ConfigView<'_>) -> RuleOutput {
    let mut out = RuleOutput::default();
    let doc = match &view.doc {
        Ok(doc) => *doc,
        Err(why) => {
            let (fix, note) = if why.is_stackgate_limit() {
                ("write the values without the anchors and aliases", "")
            } else {
                (
                    "fix the syntax",
                    " The CCM would fail to start on this file.",
                )
            };
            out.violations.push(Violation {
                severity: Severity::Deny,
                code: CODE_UNREADABLE,
                pointer: None,
                line: why.line(),
                location: None,
                what: format!("cannot verify [{SECTION}] {KEY}: {why}"),
                fix: fix.to_owned(),
                why: format!(
                    "stackgate cannot read the config to check [{SECTION}] {KEY}.{note} Once it \
                     reads, stackgate adds {KEY} = true if it is missing."
                ),
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: false,
            });
            return out;
        }
    };
    match doc.effective(SECTION, None, KEY) {
        None => {
            out.edits.push(IniEdit {
                section: SECTION,
                key: KEY,
                value: "true",
            });
            // Joined at compile time: this runs on every review of a config without the key.
            let (what, why) = if view.values_source {
                (MISSING_IN_VALUES_WHAT, MISSING_IN_VALUES_WHY)
            } else {
                (MISSING_WHAT, MISSING_WHY)
            };
            out.violations.push(Violation {
                severity: Severity::Warn,
                code: CODE_MISSING,
                pointer: None,
                line: None,
                location: None,
                what: what.to_owned(),
                fix: "set it to true".to_owned(),
                why: why.to_owned(),
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: true,
            });
        }
        Some(entry) => match parse_bool(entry.value.as_deref()) {
            Some(true) => {}
            Some(false) => out.violations.push(Violation {
                severity: Severity::Deny,
                code: CODE_FALSE,
                pointer: None,
                line: Some(entry.line),
                location: None,
                what: format!("[{SECTION}] {KEY} is set to a false value"),
                fix: "set it to true".to_owned(),
                why: format!(
                    "{WHY} Where stackgate's mutating webhook may edit the object, deleting the \
                     line also works: it adds the line."
                ),
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: false,
            }),
            None => out.violations.push(Violation {
                severity: Severity::Deny,
                code: CODE_INVALID,
                pointer: None,
                line: Some(entry.line),
                location: None,
                what: format!("[{SECTION}] {KEY} is not a boolean the CCM accepts"),
                fix: "set it to true".to_owned(),
                why: "The CCM accepts true/yes/on/1 or false/no/off/0, any case; on anything else \
                      it would fail to start."
                    .to_owned(),
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: false,
            }),
        },
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str) -> RuleOutput {
        crate::rules::run_on_text(check, text, true)
    }

    #[test]
    fn missing_in_one_values_source_is_worded_as_such() {
        let doc = crate::cloudconf::Document::parse("[Global]\nregion = r\n").unwrap();
        let out = check(&ConfigView {
            doc: Ok(&doc),
            secret: true,
            configmap: false,
            values_source: true,
            ccm_version: None,
        });
        assert_eq!(out.violations.len(), 1);
        let message = &out.violations[0].message();
        assert!(message.contains("is not set in these values"), "{message}");
        assert!(
            message.contains("unless another values source"),
            "{message}"
        );
        assert!(!message.contains("is not set, so the CCM"), "{message}");
        assert_eq!(out.edits.len(), 1);
    }

    /// The wording of the missing-key warning, in both forms, as it was written with `format!`.
    #[test]
    fn missing_key_wording() {
        for values_source in [false, true] {
            let doc = crate::cloudconf::Document::parse("[Global]\nregion = r\n").unwrap();
            let out = check(&ConfigView {
                doc: Ok(&doc),
                secret: true,
                configmap: false,
                values_source,
                ccm_version: None,
            });
            let v = &out.violations[0];
            let (what, why) = if values_source {
                (
                    format!("[{SECTION}] {KEY} is not set in these values"),
                    format!(
                        "These values are one values source of the release: unless another \
                         values source or spec.values of the same release sets it, which this \
                         object does not show, the CCM uses its default (false). {WHY} Add \
                         `{KEY} = true` under [{SECTION}] here (the stackgate mutating webhook \
                         adds it where it may edit the object)."
                    ),
                )
            } else {
                (
                    format!("[{SECTION}] {KEY} is not set (default false)"),
                    format!(
                        "{WHY} Add `{KEY} = true` under [{SECTION}] (the stackgate mutating \
                         webhook adds it where it may edit the object)."
                    ),
                )
            };
            assert_eq!((&v.what, &v.why), (&what, &why), "{values_source}");
        }
    }

    #[test]
    fn true_in_every_spelling_passes() {
        for v in ["true", "TRUE", "yes", "On", "1", "\"true\""] {
            let out = run(&format!("[LoadBalancer]\n{KEY} = {v}\n"));
            assert_eq!(out, RuleOutput::default(), "{v}");
        }
        // A bare key is true in gcfg.
        assert_eq!(
            run(&format!("[loadbalancer]\n{KEY}\n")),
            RuleOutput::default()
        );
    }

    #[test]
    fn false_in_every_spelling_is_denied_with_the_line() {
        for v in ["false", "FALSE", "no", "Off", "0"] {
            let out = run(&format!("[Global]\n\n[LoadBalancer]\n{KEY}={v}\n"));
            assert_eq!(out.violations.len(), 1, "{v}");
            assert_eq!(out.violations[0].severity, Severity::Deny);
            assert_eq!(out.violations[0].line, Some(4));
            assert!(out.edits.is_empty());
        }
    }

    #[test]
    fn last_occurrence_wins() {
        let out = run(&format!(
            "[LoadBalancer]\n{KEY}=true\n[LoadBalancer]\n{KEY}=false\n"
        ));
        assert_eq!(out.violations[0].line, Some(4));
        let out = run(&format!("[LoadBalancer]\n{KEY}=false\n{KEY}=true\n"));
        assert!(out.violations.is_empty());
    }

    #[test]
    fn subsection_does_not_count() {
        let out = run(&format!("[LoadBalancer \"x\"]\n{KEY}=true\n"));
        assert_eq!(out.edits.len(), 1);
    }

    #[test]
    fn missing_key_is_an_edit_and_a_warning() {
        let out = run("[Global]\nregion=RegionOne\n");
        assert_eq!(
            out.edits,
            vec![IniEdit {
                section: SECTION,
                key: KEY,
                value: "true"
            }]
        );
        assert_eq!(out.violations[0].severity, Severity::Warn);
    }

    #[test]
    fn invalid_literal_is_denied_without_echoing_it() {
        let out = run(&format!("[LoadBalancer]\n{KEY}=sure-thing\n"));
        assert_eq!(out.violations[0].severity, Severity::Deny);
        assert!(!out.violations[0].message().contains("sure-thing"));
    }
}
