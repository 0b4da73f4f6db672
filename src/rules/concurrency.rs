//! `ccm-concurrency`: the OpenStack CCM must not sync Services in parallel.
//!
//! Facts (domain-facts §1.5): `--concurrent-service-syncs` (default 1) sets how many Services
//! the service controller reconciles at once, and the same worker count parallelises node
//! syncs. Octavia answers 409 "immutable" to every mutating call on a load balancer while any
//! of its children is PENDING_*, and with shared load balancers (`max-shared-lb` > 1) two
//! Services can hit the same load balancer at once. Serial API calls only help if the calls
//! are serial end to end, so in `enforce` mode this rule denies when the serial-calls policy
//! enforces and warns otherwise.
//!
//! The default policy runs it in `warn` mode (domain-facts §9.1): the evidence that more than
//! one sync at a time causes the race is weak. The only upstream advice to use 1 is a
//! debugging tip (cloud-provider-openstack `docs/developers-guide.md`), and Gardener and
//! kubernikus run 10 (sapcc/kubernikus#471). `enforce` stays available for clusters that want
//! the deny; in `warn` mode a value the CCM cannot parse is a warning too.

use kube::core::{DynamicObject, GroupVersionKind};

use serde::{Deserialize, Serialize};

use crate::sites::ObjectPlaces;

use super::ccm_workload::{CcmMarkers, has_reference, pod_spec_path};
use super::{
    Check, Example, Family, ObjectInput, RuleId, RuleOutput, Severity, Violation, parse_params,
};

/// The family: reads workloads and the CCM chart's `controllerExtraArgs`.
pub static FAMILY: Family = Family {
    id: RuleId::new("ccm-concurrency"),
    check: Check::Object(check_object),
    facts: &[],
    params: &["ccmImages", "ccmArgs"],
    parse_params: parse_params::<ConcurrencyParams>,
    codes: &[CODE_PARALLEL, CODE_INVALID, CODE_REFERENCE],
    example: || {
        Some(Example::create(
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [{
                "name": "occm",
                "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0",
                "args": ["--cloud-provider=openstack", "--concurrent-service-syncs=4"]}]}}}}),
        ))
    },
    embedded: true,
    default_policy: (
        "ccm-concurrency.yaml",
        include_str!("../../policies/ccm-concurrency.yaml"),
    ),
};

/// `--concurrent-service-syncs` above 1.
pub const CODE_PARALLEL: &str = "parallel-syncs";
/// A value pflag refuses: the CCM does not start.
pub const CODE_INVALID: &str = "invalid";
/// A `$(VAR)` reference: unknown at admission.
pub const CODE_REFERENCE: &str = "unknown-reference";

/// `params` of a ccm-concurrency policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConcurrencyParams {
    /// A container runs the OpenStack CCM when its image contains one of these.
    #[serde(default)]
    pub ccm_images: Vec<String>,
    /// ... or when its args/command contain one of these arguments.
    #[serde(default)]
    pub ccm_args: Vec<String>,
}

fn check_object(input: &ObjectInput<'_>) -> RuleOutput {
    let defaults = ConcurrencyParams::default();
    let params = input.params.get().unwrap_or(&defaults);
    check_within(input.places, params, severity(input), input.context.cancel)
}

/// The flag this rule reads.
pub const FLAG: &str = "--concurrent-service-syncs";

/// The value of one `--concurrent-service-syncs` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagValue {
    /// A Go integer.
    Int(i64),
    /// Missing or not an integer: pflag refuses it and the CCM does not start.
    Invalid,
    /// Contains a `$(VAR)` reference, which the kubelet expands from the container's
    /// environment when it starts the container: unknown at admission.
    Reference,
}

/// One `--concurrent-service-syncs` setting found in an argument list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagUse {
    /// Index of the argument holding the flag.
    pub index: usize,
    /// The value.
    pub value: FlagValue,
}

/// Finds every use of [`FLAG`] in `args`, in order (both `--flag=N` and `--flag N`; a shell
/// command line inside one argument is split on whitespace).
pub fn flag_uses(args: &[&str]) -> Vec<FlagUse> {
    let mut uses = Vec::new();
    for (index, arg) in args.iter().enumerate() {
        let words: Vec<&str> = arg.split_whitespace().collect();
        for (w, word) in words.iter().enumerate() {
            let value = if let Some(v) = word.strip_prefix(FLAG).and_then(|r| r.strip_prefix('=')) {
                Some(v.trim_matches(['"', '\'']))
            } else if *word == FLAG {
                // The value is the next word, in this argument or the next one.
                words.get(w + 1).copied().or_else(|| {
                    args.get(index + 1)
                        .and_then(|a| a.split_whitespace().next())
                })
            } else {
                continue;
            };
            let value = match value {
                Some(v) if has_reference(v) => FlagValue::Reference,
                Some(v) => parse_go_int(v).map_or(FlagValue::Invalid, FlagValue::Int),
                None => FlagValue::Invalid,
            };
            uses.push(FlagUse { index, value });
        }
    }
    uses
}

/// The use that counts: pflag parses the arguments in order and the last setting of a flag
/// wins.
pub fn effective_use(args: &[&str]) -> Option<FlagUse> {
    flag_uses(args).pop()
}

/// Go's `strconv.ParseInt(s, 0, 64)` for the forms people write: decimal, `0x`, `0o`, `0b`,
/// optional sign and `_` separators.
fn parse_go_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    let lower = clean.to_ascii_lowercase();
    let (radix, body) = if let Some(b) = lower.strip_prefix("0x") {
        (16, b)
    } else if let Some(b) = lower.strip_prefix("0o") {
        (8, b)
    } else if let Some(b) = lower.strip_prefix("0b") {
        (2, b)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    let n = i64::from_str_radix(body, radix).ok()?;
    Some(if negative { -n } else { n })
}

/// Severity of a finding: deny only while the serial-calls policy enforces.
pub fn severity(input: &ObjectInput<'_>) -> Severity {
    if input.context.enforces(super::serial::FAMILY.id) {
        Severity::Deny
    } else {
        Severity::Warn
    }
}

/// Runs the rule on a workload object.
pub fn check(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    params: &ConcurrencyParams,
    severity: Severity,
) -> RuleOutput {
    check_within(
        &ObjectPlaces::new(gvk, object),
        params,
        severity,
        &crate::budget::Cancel::never(),
    )
}

/// [`check`] that stops reading chart values once `cancel` fires.
fn check_within(
    places: &ObjectPlaces<'_>,
    params: &ConcurrencyParams,
    severity: Severity,
    cancel: &crate::budget::Cancel,
) -> RuleOutput {
    let (gvk, object) = (places.gvk(), places.object());
    let mut out = RuleOutput::default();
    // The CCM Helm chart's `controllerExtraArgs` inside GitOps objects and values files.
    for (location, pointer, args) in
        crate::sites::helm::helm_controller_extra_args_all_in(places, cancel)
    {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if let Some(found) = effective_use(&args) {
            let location = format!("{location}[{}]", found.index);
            if let Some(v) = violation(&location, pointer.clone(), found.value, severity) {
                out.violations.push(v);
            }
        }
    }
    if pod_spec_path(gvk).is_none() {
        // No pod spec, no container: the markers (two lists) are not built for nothing.
        return out;
    }
    let markers = CcmMarkers::new(&params.ccm_images, &params.ccm_args);
    for container in markers.containers(gvk, object) {
        // The container's argv is command followed by args; the last setting wins.
        let Some(found) = effective_use(&container.argv()) else {
            continue;
        };
        let (field, index, pointer) = container.locate(found.index);
        let location = format!("{} {field}[{index}]", container.described);
        if let Some(v) = violation(&location, pointer, found.value, severity) {
            out.violations.push(v);
        }
    }
    out
}

/// The violation for the flag use that counts, or None when the value is fine (1 or less).
pub fn violation(
    location: &str,
    pointer: String,
    value: FlagValue,
    severity: Severity,
) -> Option<Violation> {
    let (code, what, fix, why, severity) = match value {
        FlagValue::Int(n) if n <= 1 => return None,
        FlagValue::Int(n) => (
            CODE_PARALLEL,
            format!("{FLAG}={n} lets the CCM reconcile {n} Services at once"),
            "set it to 1 (default) or remove it".to_owned(),
            "The CCM then also runs node syncs in parallel. Octavia answers 409 \"immutable\" \
             to every call on a load balancer while one of its children is PENDING_*, and \
             Services sharing a load balancer then collide. The default is 1."
                .to_owned(),
            severity,
        ),
        FlagValue::Invalid => (
            CODE_INVALID,
            format!("{FLAG} has a value that is not an integer"),
            format!("remove the flag or set {FLAG}=1"),
            "The CCM would fail to parse its flags and not start.".to_owned(),
            Severity::Deny,
        ),
        FlagValue::Reference => (
            CODE_REFERENCE,
            format!("the value of {FLAG} is a $(VAR) reference stackgate cannot check"),
            "make sure it expands to 1, or remove the flag (default 1)".to_owned(),
            format!(
                "The value of {FLAG} cannot be checked at admission: the kubelet expands the \
                 $(VAR) reference from the container's environment at start. Above 1 the CCM \
                 reconciles several Services at once and Octavia answers 409 \"immutable\" to \
                 calls on a load balancer with a PENDING_* child."
            ),
            Severity::Warn,
        ),
    };
    Some(Violation {
        severity,
        code,
        line: None,
        pointer: Some(pointer),
        location: Some(location.to_owned()),
        what,
        fix,
        why,
        notes: Vec::new(),
        unseen_overlay: None,
        fixed_by_edit: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_forms() {
        let uses = flag_uses(&["--v=2", "--concurrent-service-syncs=4"]);
        assert_eq!(
            uses,
            vec![FlagUse {
                index: 1,
                value: FlagValue::Int(4)
            }]
        );
        let uses = flag_uses(&["--concurrent-service-syncs", "0x10"]);
        assert_eq!(
            uses,
            vec![FlagUse {
                index: 0,
                value: FlagValue::Int(16)
            }]
        );
        let uses =
            flag_uses(&["/bin/occm --cloud-provider=openstack --concurrent-service-syncs 3"]);
        assert_eq!(
            uses,
            vec![FlagUse {
                index: 0,
                value: FlagValue::Int(3)
            }]
        );
        let uses = flag_uses(&["--concurrent-service-syncs=many"]);
        assert_eq!(
            uses,
            vec![FlagUse {
                index: 0,
                value: FlagValue::Invalid
            }]
        );
        assert!(flag_uses(&["--concurrent-service-syncs-x=4", "--other"]).is_empty());
    }

    #[test]
    fn the_last_setting_wins_in_both_forms() {
        let last = |args: &[&str]| effective_use(args).map(|u| (u.index, u.value));
        assert_eq!(
            last(&[
                "--concurrent-service-syncs=4",
                "--concurrent-service-syncs",
                "1"
            ]),
            Some((1, FlagValue::Int(1)))
        );
        assert_eq!(
            last(&[
                "--concurrent-service-syncs",
                "1",
                "--concurrent-service-syncs=4"
            ]),
            Some((2, FlagValue::Int(4)))
        );
        assert_eq!(
            last(&[
                "--concurrent-service-syncs=many",
                "--concurrent-service-syncs=1"
            ]),
            Some((1, FlagValue::Int(1)))
        );
        assert_eq!(
            last(&["occm --concurrent-service-syncs 1 --concurrent-service-syncs 3"]),
            Some((0, FlagValue::Int(3)))
        );
        assert_eq!(last(&["--v=2"]), None);
    }

    #[test]
    fn variable_references_are_unknown_not_invalid() {
        for args in [
            &["--concurrent-service-syncs=$(SYNCS)"][..],
            &["--concurrent-service-syncs", "$(SYNCS)"],
            &["--concurrent-service-syncs=\"$(SYNCS)\""],
            &[
                "--concurrent-service-syncs=4",
                "--concurrent-service-syncs=$(SYNCS)",
            ],
        ] {
            let used = effective_use(args).unwrap();
            assert_eq!(used.value, FlagValue::Reference, "{args:?}");
            let v = violation("x", "/p".into(), used.value, Severity::Deny).unwrap();
            assert_eq!(v.severity, Severity::Warn, "{args:?}");
            assert!(v.message().contains(FLAG), "{}", v.message());
            assert!(!v.message().contains("SYNCS"), "{}", v.message());
            assert!(!v.message().contains("fail"), "{}", v.message());
        }
        // `$$(X)` is the escaped literal `$(X)`, which pflag cannot parse.
        assert_eq!(
            effective_use(&["--concurrent-service-syncs=$$(SYNCS)"]).map(|u| u.value),
            Some(FlagValue::Invalid)
        );
        assert_eq!(
            effective_use(&["--concurrent-service-syncs=$$$(SYNCS)"]).map(|u| u.value),
            Some(FlagValue::Reference)
        );
        // A reference overridden by a later literal is judged by the literal.
        assert!(
            effective_use(&[
                "--concurrent-service-syncs=$(SYNCS)",
                "--concurrent-service-syncs=1"
            ])
            .is_some_and(|u| u.value == FlagValue::Int(1))
        );
    }

    #[test]
    fn go_ints() {
        assert_eq!(parse_go_int("1_000"), Some(1000));
        assert_eq!(parse_go_int("0b11"), Some(3));
        assert_eq!(parse_go_int("010"), Some(8));
        assert_eq!(parse_go_int("-2"), Some(-2));
        assert_eq!(parse_go_int("1.5"), None);
        assert_eq!(parse_go_int(""), None);
    }
}
