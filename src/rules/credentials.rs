//! `credential-placement`: no credentials in a cloud config held by a ConfigMap.
//!
//! ConfigMaps are readable far more widely than Secrets (any `get configmaps` in the
//! namespace, often cluster-wide tooling). The OpenShift model keeps the cloud config in a
//! ConfigMap and the credentials in a Secret / clouds.yaml (`use-clouds = true`), which the
//! cluster-cloud-controller-manager-operator enforces (domain-facts §3). Values are never
//! echoed.

use super::{ConfigView, RuleOutput, Severity, Violation};
use crate::cloudconf::eq_fold;

/// `[Global]` keys that carry a credential.
pub const CREDENTIAL_KEYS: &[&str] = &[
    "password",
    "application-credential-secret",
    "token",
    "trustee-password",
];

/// Runs the rule on one cloud config.
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
    let credentials: Vec<(&str, _)> = doc
        .entries()
        .filter(|e| eq_fold(e.section, "Global"))
        .filter_map(|e| {
            let key = CREDENTIAL_KEYS.iter().find(|k| eq_fold(e.key, k))?;
            Some((*key, e))
        })
        .collect();
    for (key, entry) in &credentials {
        if entry.value.as_deref().is_none_or(|v| v.is_empty()) {
            continue;
        }
        let repeated = if credentials.iter().filter(|(k, _)| k == key).count() > 1 {
            " (another line setting the key does not remove this one from the ConfigMap)"
        } else {
            ""
        };
        out.violations.push(Violation {
            severity: Severity::Deny,
            line: Some(entry.line),
            message: format!(
                "[Global] {key} holds a credential (value not shown) in a ConfigMap{repeated}, \
                 which anyone who can read ConfigMaps in this namespace can read. Fix: move it \
                 to a Secret (e.g. kube-system/cloud-config, key cloud.conf) or to clouds.yaml \
                 with `use-clouds = true`, and rotate the credential"
            ),
            fixed_by_edit: false,
        });
    }
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
            assert!(!out.violations[0].message.contains("s3cr3t-value"));
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
            assert!(!out.violations[0].message.contains("s3cr3t-value"));
        }
        let out = run("[Global]\npassword=one-value\npassword=two-value\n", true);
        let lines: Vec<_> = out.violations.iter().map(|v| v.line).collect();
        assert_eq!(lines, vec![Some(2), Some(3)]);
    }

    #[test]
    fn empty_values_and_comments_are_fine() {
        let out = run("[Global]\npassword=\n#token=abc\n", true);
        assert!(out.violations.is_empty());
    }
}
