//! `credential-placement`: no credentials in a cloud config held by a ConfigMap.
//!
//! ConfigMaps are readable far more widely than Secrets (any `get configmaps` in the
//! namespace, often cluster-wide tooling). The OpenShift model keeps the cloud config in a
//! ConfigMap and the credentials in a Secret / clouds.yaml (`use-clouds = true`), which the
//! cluster-cloud-controller-manager-operator enforces (domain-facts §3). Values are never
//! echoed.

use super::{Check, Example, Family, NoParams, RuleId, parse_params};
use super::{ConfigView, KindCollector, RuleOutput, Severity, Violation};
use crate::cloudconf::{EntryRef, FoldName, schema};

/// The family: reads each cloud config held by a ConfigMap.
pub static FAMILY: Family = Family {
    id: RuleId::new("credential-placement"),
    check: Check::CloudConfig(|view, _, _| check(view)),
    facts: &[],
    params: &[],
    parse_params: parse_params::<NoParams>,
    codes: &[CODE_CREDENTIAL, CODE_WRAPPED_CREDENTIAL],
    example: || {
        Some(Example::cloud_config(
            "[Global]\napplication-credential-id = 0123\napplication-credential-secret = <not shown>\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = true\n",
        ))
    },
    embedded: false,
    default_policy: (
        "credential-placement.yaml",
        include_str!("../../policies/credential-placement.yaml"),
    ),
};

/// A credential key with a value in a ConfigMap.
pub const CODE_CREDENTIAL: &str = "credential";
/// A credential written on the line after its key (gcfg reads it as a key name).
pub const CODE_WRAPPED_CREDENTIAL: &str = "wrapped-credential";

/// `[Global]` keys that carry a credential.
pub const CREDENTIAL_KEYS: &[&str] = &CREDENTIAL_NAMES;

/// [`CREDENTIAL_KEYS`] as an array, for a lookup table of the same length.
const CREDENTIAL_NAMES: [&str; 4] = [
    "password",
    "application-credential-secret",
    "token",
    "trustee-password",
];

/// What a credential in a ConfigMap is told, one per [`CREDENTIAL_NAMES`] (same order):
/// written out rather than joined on every review of such a ConfigMap.
const CREDENTIAL_WHATS: [&str; CREDENTIAL_NAMES.len()] = [
    "[Global] password holds a credential (value not shown)",
    "[Global] application-credential-secret holds a credential (value not shown)",
    "[Global] token holds a credential (value not shown)",
    "[Global] trustee-password holds a credential (value not shown)",
];

/// Why a credential in a ConfigMap matters, as its first part ends: with and without the
/// note that another line setting the key does not remove it.
macro_rules! credential_why {
    ($repeated:literal) => {
        concat!(
            "It is in a ConfigMap, which anyone who can read ConfigMaps in this namespace can \
             read",
            $repeated,
            ". Move it to a Secret (e.g. kube-system/cloud-config, key cloud.conf) or to \
             clouds.yaml with `use-clouds = true`, and rotate the credential."
        )
    };
}
/// Why a credential set once in the ConfigMap matters.
const CREDENTIAL_WHY: &str = credential_why!("");
/// Why a credential the ConfigMap sets on more than one line matters.
const REPEATED_CREDENTIAL_WHY: &str =
    credential_why!(" (another line setting the key does not remove this one from the ConfigMap)");

/// Runs the rule on one cloud config.
///
/// Linear in the number of entries; at most [`super::MAX_FINDINGS_PER_KIND`] findings per
/// kind are listed one by one.
pub fn check(view: &ConfigView<'_>) -> RuleOutput {
    let mut out = RuleOutput::default();
    if !view.configmap {
        return out;
    }
    let Ok(doc) = &view.doc else {
        return out;
    };
    // Every occurrence counts, not only the one the CCM uses: a later `password =` changes
    // what the CCM reads but not what the ConfigMap holds. A `[Global "x"]` header is ignored
    // by the CCM, and its values are still in the ConfigMap.
    // Two streaming passes over the names (views are built only for the credential entries
    // and the one after an empty credential, never collected: a config of 200 000 lines must
    // not cost another copy of itself).
    let global = || doc.entry_refs_in("Global");
    // Occurrences per credential key, counted once up front (one pass, not one per entry).
    let mut counts = [0usize; CREDENTIAL_KEYS.len()];
    let names = CREDENTIAL_NAMES.map(FoldName::new);
    let credential_index = |e: &EntryRef<'_>| {
        names
            .iter()
            .position(|n| n.may_match(e.key_tag) && n.matches(e.key))
    };
    for (_, e) in global() {
        if let Some(c) = credential_index(&e).and_then(|i| counts.get_mut(i)) {
            *c += 1;
        }
    }
    let mut found = KindCollector::new(CODE_CREDENTIAL);
    let mut wrapped = KindCollector::new(CODE_WRAPPED_CREDENTIAL);
    let mut entries = global().peekable();
    // Findings come from credential entries (and the entry after one): the pass ends after
    // the last of them.
    let mut credentials_left: usize = counts.iter().sum();
    while credentials_left > 0
        && let Some((at, e)) = entries.next()
    {
        let Some(index) = credential_index(&e) else {
            continue;
        };
        credentials_left -= 1;
        let Some(entry) = doc.entry(at) else {
            continue;
        };
        let key = CREDENTIAL_KEYS.get(index).copied().unwrap_or("password");
        let value = entry.value.as_deref();
        if value.is_some_and(|v| !v.is_empty()) {
            if !found.wants_detail() {
                found.fold(Severity::Deny, Some(entry.line));
                continue;
            }
            let why = if counts.get(index).is_some_and(|&n| n > 1) {
                REPEATED_CREDENTIAL_WHY
            } else {
                CREDENTIAL_WHY
            };
            found.push(Violation {
                severity: Severity::Deny,
                code: CODE_CREDENTIAL,
                pointer: None,
                line: Some(entry.line),
                location: None,
                what: CREDENTIAL_WHATS
                    .get(index)
                    .copied()
                    .unwrap_or_default()
                    .to_owned(),
                fix: "move it to a Secret and rotate it".to_owned(),
                why: why.to_owned(),
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: false,
            });
            continue;
        }
        // `password =` with the value on the next line: gcfg does not continue a value
        // there, it reads that line as a variable name (the CCM ignores it). The credential
        // is still in the ConfigMap.
        let Some(next) = entries.peek().and_then(|&(next_at, _)| doc.entry(next_at)) else {
            continue;
        };
        if next.value.is_none()
            && next.line == entry.last_line + 1
            && next.section_line == entry.section_line
        {
            // Past the detailed ones, count without the plausibility test (an edit-distance
            // search over every key name): a bare key right after an empty credential is
            // suspicious enough to be counted.
            if !wrapped.wants_detail() {
                wrapped.fold(Severity::Deny, Some(next.line));
                continue;
            }
            if schema::is_displayable_key(next.key) {
                continue;
            }
            wrapped.push(Violation {
                severity: Severity::Deny,
                code: CODE_WRAPPED_CREDENTIAL,
                pointer: None,
                line: Some(next.line),
                location: None,
                what: format!(
                    "probably the credential of `{key}` on the line before, on its own line \
                     (value not shown)"
                ),
                fix: "move it to a Secret, after `=` on one line, and rotate it".to_owned(),
                why: "gcfg reads the line as a key name, so the CCM does not use it, and anyone \
                      who can read ConfigMaps in this namespace can read it. Move the credential \
                      to a Secret (e.g. kube-system/cloud-config, key cloud.conf) or to \
                      clouds.yaml with `use-clouds = true`, write it after `=` on the same \
                      line, and rotate it."
                    .to_owned(),
                notes: Vec::new(),
                unseen_overlay: None,
                fixed_by_edit: false,
            });
        }
    }
    found.finish(&mut out.violations, "credentials in this ConfigMap");
    wrapped.finish(
        &mut out.violations,
        "lines that may be credentials written below their key",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, configmap: bool) -> RuleOutput {
        crate::rules::run_on_text(check, text, configmap)
    }

    #[test]
    fn each_credential_key_is_denied_in_a_configmap_only() {
        for key in CREDENTIAL_KEYS {
            let text = format!("[Global]\nregion=r\n{key}=s3cr3t-value\n");
            let out = run(&text, true);
            assert_eq!(out.violations.len(), 1, "{key}");
            assert_eq!(out.violations[0].line, Some(3));
            assert!(!out.violations[0].message().contains("s3cr3t-value"));
            assert!(run(&text, false).violations.is_empty(), "{key} in a Secret");
        }
    }

    #[test]
    fn every_occurrence_counts_not_only_the_effective_one() {
        for text in [
            "[Global]\npassword=s3cr3t-value\npassword=\n",
            "[Global]\nPassword=s3cr3t-value\n[global]\npassword=\n",
            "[Global \"x\"]\ntoken=s3cr3t-value\n[Global]\nregion=r\n",
        ] {
            let out = run(text, true);
            assert_eq!(out.violations.len(), 1, "{text:?}");
            assert_eq!(out.violations[0].line, Some(2), "{text:?}");
            assert!(!out.violations[0].message().contains("s3cr3t-value"));
        }
        let out = run("[Global]\npassword=one-value\npassword=two-value\n", true);
        let lines: Vec<_> = out.violations.iter().map(|v| v.line).collect();
        assert_eq!(lines, vec![Some(2), Some(3)]);
    }

    /// Keys that share a credential key's length and first and last letters (its lookup tag)
    /// are not credentials.
    #[test]
    fn keys_like_a_credential_key_are_not_credentials() {
        let out = run(
            "[Global]\npa55word=value\ntaken=value\napplication-credential-sxcret=v\n",
            true,
        );
        assert!(out.violations.is_empty(), "{out:?}");
        let out = run("[Global]\npa55word=value\nPASSWORD=value\n", true);
        let lines: Vec<_> = out.violations.iter().map(|v| v.line).collect();
        assert_eq!(lines, vec![Some(3)]);
    }

    /// The written-out texts are the ones joined from the key's name.
    #[test]
    fn each_credential_key_has_its_own_text() {
        for (key, what) in CREDENTIAL_NAMES.iter().zip(CREDENTIAL_WHATS) {
            assert_eq!(
                what,
                format!("[Global] {key} holds a credential (value not shown)")
            );
        }
        let text = "[Global]\ntoken=one-value\ntoken=two-value\npassword=three\n";
        let out = run(text, true);
        let whys: Vec<_> = out.violations.iter().map(|v| v.why.as_str()).collect();
        assert_eq!(
            whys,
            [
                REPEATED_CREDENTIAL_WHY,
                REPEATED_CREDENTIAL_WHY,
                CREDENTIAL_WHY
            ]
        );
        assert!(CREDENTIAL_WHY.starts_with(
            "It is in a ConfigMap, which anyone who can read ConfigMaps in this namespace can \
             read. Move it to a Secret"
        ));
    }

    #[test]
    fn empty_values_and_comments_are_fine() {
        let out = run("[Global]\npassword=\n#token=abc\n", true);
        assert!(out.violations.is_empty());
    }
}
