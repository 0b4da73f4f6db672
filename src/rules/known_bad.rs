//! `known-bad-lb-settings`: load-balancer settings documented to break.
//!
//! * `use-octavia = false` asks for Neutron LBaaS v2: deprecated, leaks admin-owned resources
//!   under concurrent teardown, and since CCM v1.26.0 the key is ignored altogether
//!   (cloud-provider-openstack PR #1882; domain-facts §1.3).
//! * `lb-provider = ovn` needs `lb-method = SOURCE_IP_PORT`: the default ROUND_ROBIN is
//!   rejected by Octavia ("OVN provider does not support ROUND_ROBIN algorithm";
//!   CPO docs l.213; domain-facts §1.4). Both keys exist only in `[LoadBalancer]`
//!   (`[LoadBalancerClass "x"]` carries network and subnet keys only).

use super::{Check, Example, Family, NoParams, RuleId, parse_params};
use super::{ConfigView, RuleOutput, Severity, Violation};
use crate::cloudconf::parse_bool;

/// The family: reads each cloud config.
pub static FAMILY: Family = Family {
    id: RuleId::new("known-bad-lb-settings"),
    check: Check::CloudConfig(|view, _, _| check(view)),
    facts: &[],
    params: &[],
    parse_params: parse_params::<NoParams>,
    codes: &[CODE_USE_OCTAVIA_FALSE, CODE_OVN_LB_METHOD],
    example: || {
        Some(Example::cloud_config(
            "[LoadBalancer]\nprovider-requires-serial-api-calls = true\nlb-provider = ovn\n",
        ))
    },
    embedded: false,
    default_policy: (
        "known-bad-lb-settings.yaml",
        include_str!("../../policies/known-bad-lb-settings.yaml"),
    ),
};

/// `use-octavia = false`.
pub const CODE_USE_OCTAVIA_FALSE: &str = "use-octavia-false";
/// `lb-provider = ovn` without `lb-method = SOURCE_IP_PORT`.
pub const CODE_OVN_LB_METHOD: &str = "ovn-lb-method";

/// Runs the rule on one cloud config.
pub fn check(view: &ConfigView<'_>) -> RuleOutput {
    let mut out = RuleOutput::default();
    // An unreadable config is reported by cloud-config-integrity.
    let Ok(doc) = &view.doc else {
        return out;
    };
    if let Some(e) = doc.effective("LoadBalancer", None, "use-octavia")
        && parse_bool(e.value.as_deref()) == Some(false)
    {
        out.violations.push(Violation {
            severity: Severity::Deny,
            code: CODE_USE_OCTAVIA_FALSE,
            pointer: None,
            line: Some(e.line),
            location: None,
            what: "[LoadBalancer] use-octavia = false asks for Neutron LBaaS v2".to_owned(),
            fix: "delete the line".to_owned(),
            why: "Neutron LBaaS v2 is deprecated and leaks admin-owned load-balancer resources \
                  when Services are torn down concurrently; CCM v1.26.0 and later ignore the key \
                  and always use Octavia, so the setting also misleads."
                .to_owned(),
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    if let Some(provider) = doc.effective("LoadBalancer", None, "lb-provider")
        && provider
            .value
            .as_deref()
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("ovn"))
    {
        let method = doc.effective("LoadBalancer", None, "lb-method");
        let ok = method
            .as_ref()
            .and_then(|m| m.value.as_deref())
            .is_some_and(|v| v.trim() == "SOURCE_IP_PORT");
        if !ok {
            let (line, what, note) = match &method {
                Some(m) => (m.line, "lb-method is not SOURCE_IP_PORT", None),
                // One values source of several: another may set it, so it is a warning that
                // says so, not a claim about the CCM.
                None if view.values_source => (
                    provider.line,
                    "lb-method is not set in these values",
                    Some(
                        "These values are one values source of the release: unless another \
                         values source or spec.values of the same release sets lb-method, which \
                         this object does not show, the CCM uses ROUND_ROBIN.",
                    ),
                ),
                None => (
                    provider.line,
                    "lb-method is not set (the CCM uses ROUND_ROBIN)",
                    None,
                ),
            };
            let missing_here = method.is_none() && view.values_source;
            out.violations.push(Violation {
                severity: if missing_here {
                    Severity::Warn
                } else {
                    Severity::Deny
                },
                code: CODE_OVN_LB_METHOD,
                pointer: None,
                line: Some(line),
                location: None,
                what: format!("[LoadBalancer] lb-provider = ovn but {what}"),
                fix: "set `lb-method = SOURCE_IP_PORT`".to_owned(),
                why: "Octavia's OVN provider rejects every other algorithm (\"OVN provider does \
                      not support ROUND_ROBIN algorithm\"), so every LoadBalancer Service fails."
                    .to_owned(),
                notes: note.map(str::to_owned).into_iter().collect(),
                unseen_overlay: None,
                fixed_by_edit: false,
            });
        }
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
    fn cases() {
        let cases: &[(&str, Option<usize>)] = &[
            ("[LoadBalancer]\nuse-octavia = false\n", Some(2)),
            ("[LoadBalancer]\nuse-octavia = NO\n", Some(2)),
            ("[LoadBalancer]\nuse-octavia = true\n", None),
            ("[LoadBalancer]\nlb-provider = ovn\n", Some(2)),
            (
                "[LoadBalancer]\nlb-provider = OVN\nlb-method = ROUND_ROBIN\n",
                Some(3),
            ),
            (
                "[LoadBalancer]\nlb-provider = ovn\nlb-method = SOURCE_IP_PORT\n",
                None,
            ),
            (
                "[loadbalancer]\nlb-provider = \"ovn\"\n[LoadBalancer]\nlb-method=SOURCE_IP_PORT\n",
                None,
            ),
            ("[LoadBalancer]\nlb-provider = amphora\n", None),
            ("[LoadBalancer]\nlb-method = SOURCE_IP_PORT\n", None),
        ];
        for (text, line) in cases {
            let out = run(text);
            match line {
                Some(line) => {
                    assert_eq!(out.violations.len(), 1, "{text}");
                    assert_eq!(out.violations[0].line, Some(*line), "{text}");
                    assert_eq!(out.violations[0].severity, Severity::Deny);
                }
                None => assert!(out.violations.is_empty(), "{text}: {out:?}"),
            }
        }
    }

    #[test]
    fn ovn_message_names_the_fix() {
        let out = run("[LoadBalancer]\nlb-provider = ovn\n");
        assert!(
            out.violations[0]
                .message()
                .contains("lb-method = SOURCE_IP_PORT")
        );
    }
}
