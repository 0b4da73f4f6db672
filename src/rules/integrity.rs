//! `cloud-config-integrity`: what makes the CCM fail at start, and what it silently ignores.
//!
//! Facts (domain-facts §1.2, §2): the CCM reads its config with gcfg v1.2.3 through
//! `gcfg.FatalOnly(gcfg.ReadInto(..))`. Syntax errors, invalid bool literals, `key=` on a bool,
//! durations without a unit and non-integers on int keys are fatal: the CCM exits at start.
//! Unknown sections and keys are "extra data" that `FatalOnly` drops without a word.
//! An unquoted `;` or `#` starts a comment, so the value is silently cut there (CPO PR #1960).
//!
//! Past gcfg, the CCM's own start-up code (domain-facts §9.1, CPO v1.36.0) exits on
//! `lb-version` other than `v2` and on an invalid `[Metadata] search-order`
//! ([`schema::start_problems`]), and only logs a warning for an `lb-provider` or
//! `container-store` it does not list; `tls-insecure` is a string of which only the exact
//! `true` disables certificate verification. `amphorav2` is listed from v1.34.0 (`f5` from
//! v1.32.0): reported where the holding object pins an older CCM (chart version or values
//! `image.tag`), and never guessed otherwise.
//!
//! Not checked, because no input stackgate sees can show it: `use-clouds = true` makes the
//! CCM read clouds.yaml (`clouds-file`, or gophercloud's search path) at start and exit when
//! it cannot, but whether that file is mounted in the CCM's pod is not in the cloud config,
//! nor in the object that holds it. Likewise an unreadable `ca-file` or bad
//! `cert-file`/`key-file`.

use std::collections::HashMap;

use super::credentials::CREDENTIAL_KEYS;
use super::{Check, Example, Family, NoParams, RuleId, parse_params};
use super::{
    ConfigView, KindCollector, MAX_FINDINGS_PER_KIND, RuleOutput, Severity, Unreadable, Violation,
};
use crate::cloudconf::schema::{self, IgnoredReason};
use crate::cloudconf::{Document, Entry};

/// gcfg's syntax error for a `_` in a section or variable name.
const UNDERSCORE: &str = "illegal character U+005F";

/// The family: reads each cloud config; runs first, so an unreadable config is reported once,
/// by it.
pub static FAMILY: Family = Family {
    id: RuleId::new("cloud-config-integrity"),
    check: Check::CloudConfig(|view, _, _| check(view)),
    facts: &[],
    params: &[],
    parse_params: parse_params::<NoParams>,
    codes: &[
        CODE_UNREADABLE,
        CODE_FATAL,
        CODE_IGNORED,
        CODE_TRUNCATED,
        CODE_TLS_INSECURE,
        CODE_UNSUPPORTED,
        CODE_NEEDS_NEWER_CCM,
        CODE_TEMPLATE_MARKERS,
    ],
    example: || {
        Some(Example::cloud_config(
            "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nmonitor-delay = 5\n",
        ))
    },
    embedded: false,
    default_policy: (
        "cloud-config-integrity.yaml",
        include_str!("../../policies/cloud-config-integrity.yaml"),
    ),
};

/// The cloud config cannot be read or parsed.
pub const CODE_UNREADABLE: &str = "unreadable";
/// A value that makes the CCM exit at start.
pub const CODE_FATAL: &str = "fatal";
/// A section or key the CCM silently ignores.
pub const CODE_IGNORED: &str = "ignored";
/// A value gcfg cuts at a comment character.
pub const CODE_TRUNCATED: &str = "truncated";
/// `tls-insecure` other than exactly `true` or `false`.
pub const CODE_TLS_INSECURE: &str = "tls-insecure-not-bool";
/// An `lb-provider` or `container-store` the CCM does not list.
pub const CODE_UNSUPPORTED: &str = "unsupported-value";
/// An `lb-provider` that only newer CCM releases list than the one the object deploys.
pub const CODE_NEEDS_NEWER_CCM: &str = "needs-newer-ccm";

/// Values hold template markers (`{{ … }}`): the config is a template, checked as written.
pub const CODE_TEMPLATE_MARKERS: &str = "template-markers";

/// Source quoted by the post-gcfg checks.
const SOURCE_CCM_START: &str = "cloud-provider-openstack v1.36.0 pkg/openstack/openstack.go \
     (ReadConfig, LoadBalancer()), pkg/util/metadata/metadata.go (CheckMetadataSearchOrder), \
     pkg/client/client.go (tls-insecure)";

/// Runs the rule on one cloud config.
pub fn check(view: &ConfigView<'_>) -> RuleOutput {
    let mut out = RuleOutput::default();
    let doc = match &view.doc {
        Ok(doc) => *doc,
        Err(why) => {
            let (fix, why_text) = if why.is_stackgate_limit() {
                (
                    "write the values without the anchors and aliases, or more simply",
                    "stackgate cannot check these values: they reach one of its caps on \
                     untrusted input (the CCM itself may read them)."
                        .to_owned(),
                )
            } else {
                let fix = match why {
                    Unreadable::Parse(e) if e.message == UNDERSCORE => "replace '_' with '-'",
                    Unreadable::Parse(_) => "fix the line named here",
                    Unreadable::Site(_) => "correct the value named here",
                };
                let underscore = match why {
                    Unreadable::Parse(e) if e.message == UNDERSCORE => {
                        " gcfg does not allow '_' in section or key names, and the CCM's keys \
                         are written with '-' (e.g. lb-method, not lb_method)."
                    }
                    _ => "",
                };
                (
                    fix,
                    format!("gcfg stops at it: \"failed to read config\".{underscore}"),
                )
            };
            out.violations.push(Violation {
                severity: Severity::Deny,
                code: CODE_UNREADABLE,
                pointer: None,
                line: why.line(),
                location: None,
                what: if why.is_stackgate_limit() {
                    why.to_string()
                } else {
                    format!("{why}; the CCM would fail to start")
                },
                fix: fix.to_owned(),
                why: why_text,
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: false,
            });
            return out;
        }
    };
    let report = schema::check(doc);
    let mut fatal = KindCollector::new(CODE_FATAL);
    let start = schema::start_problems(doc);
    // Lines whose value holds a `${NAME}` placeholder (clusterctl, envsubst, Flux postBuild)
    // or a Go/Jinja template marker (`{{ … }}`: Sveltos, Helm or Ansible templates kept in a
    // ConfigMap or Secret): substituted before the CCM reads the file, so the value is unknown
    // here, not invalid.
    let templated: Vec<usize> = doc.lines_of_values(holds_template_marker).collect();
    // Only a fatal problem asks whether its line holds one: without any, the values are not
    // searched again (most configs have none).
    let placeholders: Vec<usize> = if report.fatal.is_empty() && start.is_empty() {
        Vec::new()
    } else {
        doc.lines_of_values(schema::holds_placeholder)
            .chain(templated.iter().copied())
            .collect()
    };
    if let Some(&first) = templated.first() {
        out.violations.push(Violation {
            severity: Severity::Warn,
            code: CODE_TEMPLATE_MARKERS,
            pointer: None,
            line: Some(first),
            location: None,
            what: format!(
                "values on {} line{} hold template markers ({{{{ … }}}}): checked as written",
                templated.len(),
                if templated.len() == 1 { "" } else { "s" }
            ),
            fix: "check what the template renders too (pipe it into `stackgate check -`)"
                .to_owned(),
            why: "A template (Sveltos, Helm, Ansible) is rendered before the CCM reads the \
                  file: a value it sets is not known here, and stackgate makes no claim about \
                  it."
            .to_owned(),
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    let mut unknown = KindCollector::new(CODE_FATAL);
    for p in report.fatal.iter().chain(&start) {
        if placeholders.contains(&p.line) {
            if !unknown.wants_detail() {
                unknown.fold(Severity::Warn, Some(p.line));
                continue;
            }
            unknown.push(Violation {
                severity: Severity::Warn,
                code: CODE_FATAL,
                pointer: None,
                line: Some(p.line),
                location: None,
                what: format!(
                    "{}: a placeholder, not checked",
                    name(&p.section, p.key.as_deref()),
                ),
                fix: "make sure it is substituted before the CCM reads the file".to_owned(),
                why: "The value is substituted before use, so stackgate cannot check its type and \
                      makes no claim about it (unsubstituted, the CCM would not start)."
                    .to_owned(),
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: false,
            });
            continue;
        }
        if !fatal.wants_detail() {
            fatal.fold(Severity::Deny, Some(p.line));
            continue;
        }
        // A fatal problem is always on a known key of a known section: the names are public.
        fatal.push(Violation {
            severity: Severity::Deny,
            code: CODE_FATAL,
            pointer: None,
            line: Some(p.line),
            location: None,
            what: format!(
                "{}: {}; the CCM would not start",
                name(&p.section, p.key.as_deref()),
                problem_what(p.kind)
            ),
            fix: problem_fix(p.kind).to_owned(),
            why: format!("{}; the CCM would fail to start on this file.", p.message),
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    fatal.finish(
        &mut out.violations,
        "values that stop the CCM from starting",
    );
    unknown.finish(&mut out.violations, "placeholder values not checked");
    let mut ignored_names = KindCollector::new(CODE_IGNORED);
    // Only the ignored keys reported one by one get the hint: look up just those lines.
    let detailed: Vec<usize> = report
        .ignored
        .iter()
        .take(MAX_FINDINGS_PER_KIND)
        .filter(|i| i.key.is_some())
        .map(|i| i.line)
        .collect();
    let wrapped = wrapped_values(doc, &detailed);
    for ignored in &report.ignored {
        if ignored.key.is_none()
            && ignored.reason == IgnoredReason::UnknownSection
            && schema::read_by_another_consumer(&ignored.section).is_some()
        {
            // A section another consumer of the same config reads (cinder-csi's
            // `[BlockStorage]`, which the chart always renders): not a CCM typo.
            continue;
        }
        if ignored.reason == IgnoredReason::RemovedKey
            && still_read(view.ccm_version, &ignored.section, ignored.key.as_deref())
        {
            // The release this input pins reads the key still: not ignored there.
            continue;
        }
        if !ignored_names.wants_detail() {
            ignored_names.fold(Severity::Warn, Some(ignored.line));
            continue;
        }
        let why = match ignored.reason {
            IgnoredReason::UnknownSection => "the CCM does not read this section",
            IgnoredReason::UnknownKey => "the CCM does not know this key",
            IgnoredReason::SubsectionNotAllowed => {
                "this section takes no subsections, so the CCM skips this header and its keys"
            }
            IgnoredReason::RemovedKey => "the CCM no longer reads this key",
        };
        let name = shown_name(&ignored.section, ignored.key.as_deref());
        let kind = if ignored.key.is_some() {
            "key"
        } else {
            "section"
        };
        let (what, fix) = match &ignored.suggestion {
            Some(s) => (
                format!("{name}: silently ignored"),
                format!("did you mean `{s}`?"),
            ),
            None => (
                format!("{name}: {why}; it is silently ignored"),
                format!("remove the {kind} or correct its name"),
            ),
        };
        let mut notes = Vec::new();
        if let Some(note) = &ignored.note {
            notes.push(format!("{note}."));
        }
        if ignored.key.is_some()
            && let Some(key) = wrapped.get(&ignored.line)
        {
            let key = if schema::is_displayable_key(key) {
                format!("sets `{key}` to an empty value")
            } else {
                "has an empty value".to_owned()
            };
            notes.push(format!(
                "If this line is a value: the line before {key}, and gcfg does not continue a \
                 value on the next line, so write it after `=` on that line."
            ));
        }
        ignored_names.push(Violation {
            severity: Severity::Warn,
            code: CODE_IGNORED,
            pointer: None,
            line: Some(ignored.line),
            location: None,
            what,
            fix,
            why: match &ignored.suggestion {
                Some(_) => format!(
                    "Unknown {kind}: gcfg drops what the CCM does not read without an error, so \
                     the setting has no effect."
                ),
                None => format!(
                    "gcfg drops what the CCM does not read without an error: {why}, so the \
                     setting has no effect."
                ),
            },
            notes,
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    ignored_names.finish(
        &mut out.violations,
        "sections or keys the CCM silently ignores",
    );
    let mut truncated = KindCollector::new(CODE_TRUNCATED);
    for entry in doc.entries_with_truncating_comment() {
        if !truncated.wants_detail() {
            truncated.fold(Severity::Warn, Some(entry.line));
            continue;
        }
        let credential = CREDENTIAL_KEYS
            .iter()
            .any(|k| k.eq_ignore_ascii_case(entry.key));
        let (what, why) = if credential {
            (
                "this credential value contains an unquoted ';' or '#' (value not shown)",
                "The CCM cuts it there and authenticates with the truncated string.",
            )
        } else {
            (
                "the value contains an unquoted ';' or '#', which starts a comment",
                "The CCM cuts the value there (gcfg v1.2.3; CPO PR #1960).",
            )
        };
        truncated.push(Violation {
            severity: Severity::Warn,
            code: CODE_TRUNCATED,
            pointer: None,
            line: Some(entry.line),
            location: None,
            what: format!("{}: {what}", shown_name(entry.section, Some(entry.key))),
            fix: "wrap the value in double quotes".to_owned(),
            why: why.to_owned(),
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    truncated.finish(&mut out.violations, "values cut at an unquoted ';' or '#'");
    silent_values(doc, view.ccm_version, &mut out);
    out
}

/// Whether `value` holds a Go/Jinja template marker: `{{`, later followed by `}}`.
fn holds_template_marker(value: &str) -> bool {
    schema::find_ascii_pair(value, [b'{', b'{'])
        .is_some_and(|at| schema::find_ascii_pair(&value[at + 2..], [b'}', b'}']).is_some())
}

/// Whether every CCM release `ccm_version` allows still reads the removed key `section`
/// `key` (each release before the one that removed it, [`schema::REMOVED_KEYS`]): the version
/// pinned in the same input decides removed keys as it decides keys a release does not read
/// yet. Unknown (no version): not read, as current releases do not.
fn still_read(
    ccm_version: Option<&crate::sites::helm::CcmVersion>,
    section: &str,
    key: Option<&str>,
) -> bool {
    let (Some(version), Some(key)) = (ccm_version, key) else {
        return false;
    };
    schema::REMOVED_KEYS
        .iter()
        .find(|r| r.section.eq_ignore_ascii_case(section) && r.name.eq_ignore_ascii_case(key))
        .and_then(|r| schema::release_minor(r.removed_in))
        .is_some_and(|removed| version.all_before(removed))
}

/// Values gcfg and the CCM accept without an error that do not do what they say: a
/// `tls-insecure` other than `true`/`false`, an `lb-provider` or `container-store` the CCM
/// does not list, a provider listed only by newer CCM releases than the one deployed.
fn silent_values(
    doc: &Document,
    ccm_version: Option<&crate::sites::helm::CcmVersion>,
    out: &mut RuleOutput,
) {
    let warn = |code, line, (what, fix, why): (String, String, String)| Violation {
        severity: Severity::Warn,
        code,
        pointer: None,
        line: Some(line),
        location: None,
        what,
        fix,
        why: format!("{why} ({SOURCE_CCM_START})."),
        notes: Vec::new(),
        unseen_overlay: None,
        fixed_by_edit: false,
    };
    if let Some(e) = doc.effective("Global", None, "tls-insecure")
        && let Some(v) = e.value.as_deref()
        && !v.is_empty()
        && v != "true"
        && v != "false"
    {
        out.violations.push(warn(
            CODE_TLS_INSECURE,
            e.line,
            (
                "[Global] tls-insecure is neither exactly `true` nor `false`".to_owned(),
                "write true or false".to_owned(),
                "The CCM reads it as a string and turns certificate verification off only for \
                 exactly `true` (so `True`, `yes` or `1` keep it on)"
                    .to_owned(),
            ),
        ));
    }
    if let Some(e) = doc.effective("LoadBalancer", None, "lb-provider")
        && let Some(v) = e.value.as_deref()
    {
        match schema::LB_PROVIDERS.iter().find(|k| k.value == v) {
            None => out.violations.push(warn(
                CODE_UNSUPPORTED,
                e.line,
                (
                    "[LoadBalancer] lb-provider is not a provider the CCM supports".to_owned(),
                    format!(
                        "use one of {} (exact case)",
                        known_list(schema::LB_PROVIDERS)
                    ),
                    "The CCM only logs \"Unsupported LoadBalancer Provider\" at start and sends \
                     the value to Octavia unchanged, and its provider-specific handling (e.g. for \
                     `ovn`) does not apply"
                        .to_owned(),
                ),
            )),
            Some(known) => {
                if let (Some(since), Some(version)) = (known.since, ccm_version)
                    && let Some(minor) = schema::release_minor(since)
                    && version.all_before(minor)
                {
                    out.violations.push(warn(
                        CODE_NEEDS_NEWER_CCM,
                        e.line,
                        (
                            format!(
                                "[LoadBalancer] lb-provider = {} is supported from CCM {since}, \
                                 older than this object deploys",
                                known.value
                            ),
                            format!(
                                "deploy CCM {since} or later (chart 2.{minor}.0), or use a \
                                 provider that release supports"
                            ),
                            format!(
                                "This object deploys {}: that release logs \"Unsupported \
                                 LoadBalancer Provider\" at start and sends the value to Octavia \
                                 unchanged",
                                shown_range(version)
                            ),
                        ),
                    ));
                }
            }
        }
    }
    if let Some(version) = ccm_version {
        newer_keys(doc, version, out);
    }
    if let Some(e) = doc.effective("LoadBalancer", None, "container-store")
        && let Some(v) = e.value.as_deref()
        && !schema::CONTAINER_STORES.iter().any(|k| k.value == v)
    {
        out.violations.push(warn(
            CODE_UNSUPPORTED,
            e.line,
            (
                "[LoadBalancer] container-store is not a store the CCM supports".to_owned(),
                format!(
                    "use one of {} (exact case)",
                    known_list(schema::CONTAINER_STORES)
                ),
                "The CCM only logs \"Unsupported Container Store\" at start".to_owned(),
            ),
        ));
    }
}

/// Keys of the key table that only CCM releases newer than the pinned one read (their
/// `since`, domain-facts §9.1): the pinned release does not know them, and gcfg drops an
/// unknown key as extra data without a word. Only the effective occurrence is reported.
fn newer_keys(doc: &Document, version: &crate::sites::helm::CcmVersion, out: &mut RuleOutput) {
    for section in schema::SECTIONS.iter().filter(|s| !s.subsections) {
        for key in section.keys {
            let Some(since) = key.since else { continue };
            let Some(minor) = schema::release_minor(since) else {
                continue;
            };
            if !version.all_before(minor) {
                continue;
            }
            let Some(e) = doc.effective(section.name, None, key.name) else {
                continue;
            };
            out.violations.push(Violation {
                severity: Severity::Warn,
                code: CODE_NEEDS_NEWER_CCM,
                pointer: None,
                line: Some(e.line),
                location: None,
                what: format!(
                    "[{}] {} is read from CCM {since}, newer than this object deploys",
                    section.name, key.name
                ),
                fix: format!("deploy CCM {since} or later (chart 2.{minor}.0)"),
                why: format!(
                    "This object deploys {}: that release does not know the key and silently \
                     ignores it (cloud-provider-openstack release history, domain-facts §9.1).",
                    shown_range(version),
                ),
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: false,
            });
        }
    }
}

/// `chart version 2.33.0, v1.33` or `…, v1.32 or v1.33`.
fn shown_range(version: &crate::sites::helm::CcmVersion) -> String {
    if version.min_minor == version.max_minor {
        format!("{}, v1.{}", version.source, version.min_minor)
    } else {
        format!(
            "{}, v1.{} or v1.{}",
            version.source, version.min_minor, version.max_minor
        )
    }
}

fn known_list(values: &[schema::KnownValue]) -> String {
    values
        .iter()
        .map(|k| match k.since {
            Some(since) => format!("{} from {since}", k.value),
            None => k.value.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A fatal problem in a few words (its full message is the why).
fn problem_what(kind: schema::ProblemKind) -> &'static str {
    use schema::ProblemKind as K;
    match kind {
        K::InvalidBool => "not a boolean gcfg accepts",
        K::EmptyBool => "empty value for a boolean",
        K::BlankValue => "a variable without `=`",
        K::InvalidInt => "not an integer gcfg accepts",
        K::SignedUint => "unsigned integer with a sign",
        K::IntOutOfRange => "integer out of the 64-bit range",
        K::DurationMissingUnit => "duration without a unit",
        K::InvalidDuration => "not a Go duration",
        K::LbVersion => "only `v2` is supported",
        K::SearchOrder => "not a search order the CCM accepts",
    }
}

/// The fix of a fatal problem.
fn problem_fix(kind: schema::ProblemKind) -> &'static str {
    use schema::ProblemKind as K;
    match kind {
        K::InvalidBool | K::EmptyBool => "write true or false",
        K::BlankValue => "write `key = value`",
        K::InvalidInt | K::SignedUint | K::IntOutOfRange => "write decimal digits, e.g. 3",
        K::DurationMissingUnit => "add a unit, e.g. 5s or 1m",
        K::InvalidDuration => "write a Go duration, e.g. 5s, 500ms or 1m30s",
        K::LbVersion => "remove the line or write `lb-version = v2`",
        K::SearchOrder => "write `configDrive`, `metadataService` or both",
    }
}

fn name(section: &str, key: Option<&str>) -> String {
    match key {
        Some(key) => format!("[{section}] {key}"),
        None => format!("[{section}]"),
    }
}

/// Shown in place of a section name that is neither known nor a plausible misspelling.
pub const MASKED_SECTION: &str = "<unknown section, name not shown>";
/// Shown in place of a key that is neither known nor a plausible misspelling.
pub const MASKED_KEY: &str = "<unknown key, name not shown>";

/// `[section] key` with every name that could be a value masked.
///
/// A name gcfg reads may be a value in disguise: `password =` with the password on the next
/// line makes the password a key, and a header line can hold anything. Known names and
/// plausible misspellings of them (see [`schema::is_displayable_key`]) are public; anything
/// else is masked, whether the carrier is a Secret or a ConfigMap: the same wrapped-line
/// mistake puts a credential into either, warnings travel to terminals, CI logs and audit
/// logs, and the message names the line, which is all a user needs to find it.
fn shown_name(section: &str, key: Option<&str>) -> String {
    let section = if schema::is_displayable_section(section) {
        section
    } else {
        MASKED_SECTION
    };
    let key = key.map(|k| {
        if schema::is_displayable_key(k) {
            k
        } else {
            MASKED_KEY
        }
    });
    name(section, key)
}

/// Among the blank variables (a name without `=`) on `lines`, those that directly follow a
/// variable with an empty value in the same section: line of the blank one → key of the
/// empty one. Such a "name" is probably the value, written on its own line. One pass over
/// the entries; `lines` is short (at most [`MAX_FINDINGS_PER_KIND`]).
fn wrapped_values<'d>(doc: &'d Document, lines: &[usize]) -> HashMap<usize, &'d str> {
    let mut out = HashMap::new();
    if lines.is_empty() {
        return out;
    }
    let mut previous: Option<Entry<'_>> = None;
    for e in doc.entries() {
        if let Some(p) = &previous
            && lines.contains(&e.line)
            && e.value.is_none()
            && p.value.as_deref() == Some("")
            && e.line == p.last_line + 1
            && e.section_line == p.section_line
        {
            out.insert(e.line, p.key);
        }
        previous = Some(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value the CCM would not start on is a warning when it is a placeholder, whether or
    /// not a start-up check (`lb-version`, `search-order`) also finds something.
    #[test]
    fn a_placeholder_on_a_typed_key_is_not_checked() {
        for text in [
            "[LoadBalancer]\nmonitor-delay = ${DELAY}\n",
            "[LoadBalancer]\nmonitor-delay = ${DELAY}\nlb-version = v1\n",
        ] {
            let out = crate::rules::run_on_text(check, text, false);
            let placeholder = out
                .violations
                .iter()
                .find(|v| v.line == Some(2))
                .unwrap_or_else(|| panic!("a finding on line 2 of {text:?}: {out:?}"));
            assert_eq!(placeholder.severity, Severity::Warn, "{text:?}");
            assert!(
                placeholder.what.contains("a placeholder, not checked"),
                "{text:?}"
            );
        }
    }

    #[test]
    fn a_template_marker_is_an_opening_followed_by_a_closing() {
        assert!(holds_template_marker("{{ .Values.region }}"));
        assert!(holds_template_marker("a-{{x}}"));
        assert!(!holds_template_marker("{{}"));
        // A closing before the opening is not a marker.
        assert!(!holds_template_marker("x }} y {{"));
        assert!(!holds_template_marker("plain"));
    }
}
