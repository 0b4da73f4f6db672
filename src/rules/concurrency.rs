//! `ccm-concurrency`: the OpenStack CCM must not sync Services in parallel.
//!
//! Facts (domain-facts §1.5): `--concurrent-service-syncs` (default 1) sets how many Services
//! the service controller reconciles at once, and the same worker count parallelises node
//! syncs. Octavia answers 409 "immutable" to every mutating call on a load balancer while any
//! of its children is PENDING_*, and with shared load balancers (`max-shared-lb` > 1) two
//! Services can hit the same load balancer at once. Serial API calls only help if the calls
//! are serial end to end, so this rule denies when the serial-calls policy enforces and warns
//! otherwise.

use jsonptr::PointerBuf;
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::Value;

use super::{ObjectOutput, ObjectViolation, Severity};
use crate::policy::{Mode, Params, PolicySet, RuleId};

/// The flag this rule reads.
pub const FLAG: &str = "--concurrent-service-syncs";

/// Image substring that marks the OpenStack CCM when a policy does not say otherwise.
pub const DEFAULT_IMAGE: &str = "openstack-cloud-controller-manager";
/// Argument that marks the OpenStack CCM when a policy does not say otherwise.
pub const DEFAULT_ARG: &str = "--cloud-provider=openstack";

/// One `--concurrent-service-syncs` setting found in an argument list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlagUse {
    /// Index of the argument holding the flag.
    pub index: usize,
    /// The parsed value, or None when it is not an integer.
    pub value: Option<i64>,
}

/// Finds every use of [`FLAG`] in `args` (both `--flag=N` and `--flag N`; a shell command
/// line inside one argument is split on whitespace).
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
            uses.push(FlagUse {
                index,
                value: value.and_then(parse_go_int),
            });
        }
    }
    uses
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

/// The pod spec pointer for workload kinds, or None for kinds without one.
fn pod_spec_pointer(gvk: &GroupVersionKind) -> Option<&'static [&'static str]> {
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("", "Pod") => Some(&["spec"]),
        ("", "PodTemplate") => Some(&["template", "spec"]),
        ("apps", "Deployment" | "DaemonSet" | "StatefulSet" | "ReplicaSet") | ("batch", "Job") => {
            Some(&["spec", "template", "spec"])
        }
        ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

/// Severity of a finding: deny only while the serial-calls policy enforces.
pub fn severity(policies: &PolicySet) -> Severity {
    if policies
        .for_rule(RuleId::SerialLbApiCalls)
        .any(|p| p.mode == Mode::Enforce)
    {
        Severity::Deny
    } else {
        Severity::Warn
    }
}

/// Runs the rule on a workload object.
pub fn check(
    gvk: &GroupVersionKind,
    object: &DynamicObject,
    params: &Params,
    policies: &PolicySet,
) -> ObjectOutput {
    let mut out = ObjectOutput::default();
    // The CCM Helm chart's `controllerExtraArgs` inside GitOps objects and values files.
    for (location, pointer, args) in crate::sites::helm_controller_extra_args_all(gvk, object) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for found in flag_uses(&args) {
            let location = format!("{location}[{}]", found.index);
            if let Some(v) = violation(&location, pointer.clone(), found.value, severity(policies))
            {
                out.violations.push(v);
            }
        }
    }
    let Some(path) = pod_spec_pointer(gvk) else {
        return out;
    };
    let mut spec = &object.data;
    for token in path {
        match spec.get(token) {
            Some(v) => spec = v,
            None => return out,
        }
    }
    let images: Vec<&str> = if params.ccm_images.is_empty() {
        vec![DEFAULT_IMAGE]
    } else {
        params.ccm_images.iter().map(String::as_str).collect()
    };
    let markers: Vec<&str> = if params.ccm_args.is_empty() {
        vec![DEFAULT_ARG]
    } else {
        params.ccm_args.iter().map(String::as_str).collect()
    };
    let object_name = format!(
        "{} {}/{}",
        gvk.kind,
        object.metadata.namespace.as_deref().unwrap_or(""),
        object.metadata.name.as_deref().unwrap_or("")
    );
    for list in ["initContainers", "containers"] {
        let Some(containers) = spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (ci, container) in containers.iter().enumerate() {
            let strings = |field: &str| -> Vec<&str> {
                container
                    .get(field)
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default()
            };
            let command = strings("command");
            let args = strings("args");
            let image = container.get("image").and_then(Value::as_str).unwrap_or("");
            let is_ccm = images.iter().any(|m| image.contains(m))
                || command
                    .iter()
                    .chain(args.iter())
                    .any(|a| markers.iter().any(|m| a.contains(m)));
            if !is_ccm {
                continue;
            }
            let name = container.get("name").and_then(Value::as_str).unwrap_or("");
            for (field, list_args) in [("command", &command), ("args", &args)] {
                for found in flag_uses(list_args) {
                    let mut tokens: Vec<String> = path.iter().map(|t| (*t).to_owned()).collect();
                    tokens.extend([
                        list.to_owned(),
                        ci.to_string(),
                        field.to_owned(),
                        found.index.to_string(),
                    ]);
                    let pointer = PointerBuf::from_tokens(tokens).to_string();
                    let location =
                        format!("{object_name} container {name:?} {field}[{}]", found.index);
                    if let Some(v) = violation(&location, pointer, found.value, severity(policies))
                    {
                        out.violations.push(v);
                    }
                }
            }
        }
    }
    out
}

/// The violation for one flag use, or None when the value is fine (1 or less).
pub fn violation(
    location: &str,
    pointer: String,
    value: Option<i64>,
    severity: Severity,
) -> Option<ObjectViolation> {
    let message = match value {
        Some(n) if n <= 1 => return None,
        Some(n) => format!(
            "{location}: {FLAG}={n} lets the CCM reconcile {n} Services (and node syncs) at once. \
             Octavia answers 409 \"immutable\" to every call on a load balancer while one of its \
             children is PENDING_*, and Services sharing a load balancer then collide. Fix: \
             remove the flag (the default is 1) or set {FLAG}=1"
        ),
        None => format!(
            "{location}: {FLAG} has a value that is not an integer, so the CCM would fail to \
             parse its flags and not start. Fix: remove the flag or set {FLAG}=1"
        ),
    };
    Some(ObjectViolation {
        severity: if value.is_none() {
            Severity::Deny
        } else {
            severity
        },
        pointer: Some(pointer),
        message,
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
                value: Some(4)
            }]
        );
        let uses = flag_uses(&["--concurrent-service-syncs", "0x10"]);
        assert_eq!(
            uses,
            vec![FlagUse {
                index: 0,
                value: Some(16)
            }]
        );
        let uses =
            flag_uses(&["/bin/occm --cloud-provider=openstack --concurrent-service-syncs 3"]);
        assert_eq!(
            uses,
            vec![FlagUse {
                index: 0,
                value: Some(3)
            }]
        );
        let uses = flag_uses(&["--concurrent-service-syncs=many"]);
        assert_eq!(
            uses,
            vec![FlagUse {
                index: 0,
                value: None
            }]
        );
        assert!(flag_uses(&["--concurrent-service-syncs-x=4", "--other"]).is_empty());
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
