//! control-plane-lb-guard: refuse to delete a Cluster API control-plane Machine while the
//! cluster's API load balancer (Octavia) could not survive it.
//!
//! The incident (kubernetes-sigs/cluster-api-provider-openstack#2763): with the amphorav2
//! provider a pool member can sit in `PENDING_CREATE` while the load balancer is already
//! `ACTIVE`. CAPO before v0.14 took the member as done, Cluster API went on to delete the old
//! control-plane Machines, and the cluster went offline. CAPO ≥ 0.14 (PR #2815) waits for a
//! member it creates, but nothing waits before a member is *removed*.
//!
//! This module is pure: it decides from the request and [`GuardFacts`] that an IO adapter
//! (`crate::guard`) gathered before evaluation. It denies when
//! - a member of an API pool other than the deleted Machine's own is not
//!   `provisioning_status = ACTIVE` (a change is in flight, or failed), or the load balancer
//!   itself is `PENDING_*`;
//! - after removing the deleted Machine's member, a pool that has members would have none
//!   serving: `operating_status = ONLINE`, or `NO_MONITOR` when the pool has no health
//!   monitor (Octavia reports `NO_MONITOR` for members it does not probe).
//!
//! The deleted Machine's own member is not required to be `ACTIVE`: its state does not change
//! what keeps serving once it is gone, and requiring it would block the remediation of a
//! Machine whose member is in `ERROR`.
//!
//! When the facts are unavailable the policy's `params.unknown` decides: `admit` (default)
//! admits with a warning, `deny` refuses. Cluster API retries a refused deletion, so a denial
//! delays a rollout; it does not break it.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use kube::core::{DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};

use super::{
    Check, Example, Facts, Family, ObjectInput, Operation, RuleId, RuleOutput, Severity, Violation,
    parse_params,
};

/// The family: reads control-plane Machine DELETEs, with the load-balancer facts the guard
/// adapter (`crate::guard`) gathers before evaluation.
pub static FAMILY: Family = Family {
    id: RuleId::new("control-plane-lb-guard"),
    check: Check::Delete(check_delete),
    params: &["unknown"],
    parse_params: parse_params::<GuardParams>,
    codes: &[CODE_NOT_READY, CODE_UNAVAILABLE],
    example: || Some(example()),
    embedded: false,
    default_policy: (
        "control-plane-lb-guard.yaml",
        include_str!("../../policies/control-plane-lb-guard.yaml"),
    ),
};

/// The load balancer could not survive the deletion.
pub const CODE_NOT_READY: &str = "lb-not-ready";
/// The load balancer could not be checked (`params.unknown` decided).
pub const CODE_UNAVAILABLE: &str = "unavailable";

/// `params` of a control-plane-lb-guard policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GuardParams {
    /// What to do when the load balancer cannot be checked (`admit` with a warning, the
    /// default, or `deny`).
    #[serde(default)]
    pub unknown: Option<WhenUnknown>,
}

/// The guard on a DELETE: the Machine is the request's old object; without gathered facts
/// (the guard is off, or the request is not a control-plane Machine DELETE) it does nothing.
fn check_delete(input: &ObjectInput<'_>) -> RuleOutput {
    let Some(facts) = input.context.facts.get::<GuardFacts>(FAMILY.id) else {
        return RuleOutput::default();
    };
    let unknown = input
        .params
        .get::<GuardParams>()
        .and_then(|p| p.unknown)
        .unwrap_or_default();
    check(input.subject.kind, input.object, facts, unknown)
}

/// Label Cluster API puts on control-plane Machines.
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
/// Label naming the Machine's Cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// API group of Cluster API core objects (Machine, Cluster).
pub const CAPI_GROUP: &str = "cluster.x-k8s.io";

/// Octavia `provisioning_status` of an entity that is not changing.
pub const ACTIVE: &str = "ACTIVE";
/// Octavia `operating_status` of a member that passes its health checks.
pub const ONLINE: &str = "ONLINE";
/// Octavia `operating_status` of a member of a pool without a health monitor.
pub const NO_MONITOR: &str = "NO_MONITOR";

/// The incident every message cites.
pub const INCIDENT: &str = "kubernetes-sigs/cluster-api-provider-openstack#2763";

/// Most members named in one message; the rest are counted.
const MAX_LISTED: usize = 8;

/// What to do when the facts could not be gathered (`params.unknown`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenUnknown {
    /// Admit, with a warning (and the `unknown_admitted` guard metric).
    #[default]
    Admit,
    /// Deny: nothing is deleted unless the load balancer is known to survive it.
    Deny,
}

/// What the IO adapter found out about the Machine's API load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardFacts {
    /// There is nothing to guard (no API load balancer, the Cluster is being deleted, the
    /// infrastructure is not OpenStack, ...). `reason` says which.
    NotApplicable {
        /// Why, for logs.
        reason: String,
    },
    /// The load balancer's status tree as Octavia reported it.
    Observed(LoadBalancerStatus),
    /// The facts could not be gathered. `reason` is safe to show: it never holds a credential.
    Unavailable {
        /// What failed, e.g. "Keystone did not answer within 800ms".
        reason: String,
    },
}

/// The Octavia status tree of one load balancer (`GET /v2/lbaas/loadbalancers/{id}/status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadBalancerStatus {
    /// Load-balancer id.
    pub id: String,
    /// Load-balancer name (CAPO: `k8s-clusterapi-cluster-<namespace>-<cluster>-kubeapi`).
    pub name: String,
    /// `provisioning_status` of the load balancer.
    pub provisioning_status: String,
    /// `operating_status` of the load balancer.
    pub operating_status: String,
    /// Its pools (deduplicated across listeners).
    pub pools: Vec<PoolStatus>,
}

/// One pool of the status tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Pool id.
    pub id: String,
    /// Pool name (CAPO: `<lb name>-<port>`).
    pub name: String,
    /// Whether the pool has a health monitor (else members report `NO_MONITOR`).
    pub has_monitor: bool,
    /// Its members.
    pub members: Vec<MemberStatus>,
}

/// One member of a pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberStatus {
    /// Member id.
    pub id: String,
    /// Member name (CAPO: `<pool name>-<OpenStackMachine name>`).
    pub name: String,
    /// Member address.
    pub address: String,
    /// Member port, when reported.
    pub protocol_port: Option<u16>,
    /// `provisioning_status`.
    pub provisioning_status: String,
    /// `operating_status`.
    pub operating_status: String,
}

impl MemberStatus {
    fn describe(&self) -> String {
        let who = if self.name.is_empty() {
            format!("member {}", self.id)
        } else {
            format!("member {}", self.name)
        };
        let at = match (self.address.is_empty(), self.protocol_port) {
            (true, _) => String::new(),
            (false, Some(port)) => format!(" ({}:{port})", self.address),
            (false, None) => format!(" ({})", self.address),
        };
        format!(
            "{who}{at} is provisioning_status={}, operating_status={}",
            or_unknown(&self.provisioning_status),
            or_unknown(&self.operating_status)
        )
    }
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "<none>" } else { s }
}

/// Whether `object` of `kind` is a Cluster API control-plane Machine.
pub fn is_control_plane_machine(kind: &GroupVersionKind, object: &DynamicObject) -> bool {
    kind.group == CAPI_GROUP
        && kind.kind == "Machine"
        && object
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))
}

/// How the deleted Machine can be recognised among the pool members.
#[derive(Debug, Default)]
struct Identity {
    /// `status.addresses[*].address`.
    addresses: BTreeSet<String>,
    /// `spec.infrastructureRef.name` (the OpenStackMachine; CAPO names the member after it).
    infra_name: Option<String>,
}

impl Identity {
    fn of(machine: &DynamicObject) -> Self {
        let addresses = machine
            .data
            .pointer("/status/addresses")
            .and_then(|a| a.as_array())
            .into_iter()
            .flatten()
            .filter_map(|a| a.get("address").and_then(|v| v.as_str()))
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        let infra_name = machine
            .data
            .pointer("/spec/infrastructureRef/name")
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Self {
            addresses,
            infra_name,
        }
    }

    fn known(&self) -> bool {
        !self.addresses.is_empty() || self.infra_name.is_some()
    }

    fn owns(&self, pool: &PoolStatus, member: &MemberStatus) -> bool {
        if !member.address.is_empty() && self.addresses.contains(&member.address) {
            return true;
        }
        match &self.infra_name {
            Some(infra) if !member.name.is_empty() && !pool.name.is_empty() => {
                member
                    .name
                    .strip_prefix(pool.name.as_str())
                    .and_then(|rest| rest.strip_prefix('-'))
                    == Some(infra.as_str())
            }
            _ => false,
        }
    }
}

fn serving(pool: &PoolStatus, member: &MemberStatus) -> bool {
    member.provisioning_status == ACTIVE
        && (member.operating_status == ONLINE
            || (!pool.has_monitor && member.operating_status == NO_MONITOR))
}

/// Decides one control-plane Machine DELETE. `machine` is the request's `oldObject`.
/// Returns no violation for anything that is not a control-plane Machine.
pub fn check(
    kind: &GroupVersionKind,
    machine: &DynamicObject,
    facts: &GuardFacts,
    unknown: WhenUnknown,
) -> RuleOutput {
    if !is_control_plane_machine(kind, machine) {
        return RuleOutput::default();
    }
    let what = describe_machine(machine);
    let violation = match facts {
        GuardFacts::NotApplicable { .. } => None,
        GuardFacts::Unavailable { reason } => Some(unavailable(&what, reason, unknown)),
        GuardFacts::Observed(lb) => observed(&what, machine, lb),
    };
    RuleOutput {
        violations: violation.into_iter().collect(),
        ..RuleOutput::default()
    }
}

fn describe_machine(machine: &DynamicObject) -> String {
    let name = machine.metadata.name.as_deref().unwrap_or("<unnamed>");
    let cluster = machine
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .map(String::as_str)
        .or_else(|| {
            machine
                .data
                .pointer("/spec/clusterName")
                .and_then(|v| v.as_str())
        });
    let mut out = match machine.metadata.namespace.as_deref() {
        Some(ns) => format!("control-plane Machine {ns}/{name}"),
        None => format!("control-plane Machine {name}"),
    };
    if let Some(cluster) = cluster {
        let _ = write!(out, " of Cluster {cluster}");
    }
    out
}

fn unavailable(what: &str, reason: &str, unknown: WhenUnknown) -> Violation {
    // Warnings are cut at 256 characters by the admission adapter: the outcome and the reason
    // come first.
    let (severity, message) = match unknown {
        WhenUnknown::Admit => (
            Severity::Warn,
            format!(
                "Admitted without checking the API load balancer (params.unknown is admit): \
                 {reason}. Deleting {what} while a load-balancer member is pending or the last \
                 one serving can take the cluster API offline ({INCIDENT}); check that every \
                 member is ACTIVE and another one is ONLINE."
            ),
        ),
        WhenUnknown::Deny => (
            Severity::Deny,
            format!(
                "Refusing to delete {what}: the API load balancer could not be checked \
                 (params.unknown is deny): {reason}. Deleting a control-plane node while a \
                 load-balancer member is pending or the last one serving can take the cluster \
                 API offline ({INCIDENT}). Cluster API retries the deletion; it goes through \
                 once the load balancer can be checked."
            ),
        ),
    };
    Violation {
        severity,
        code: CODE_UNAVAILABLE,
        line: None,
        pointer: None,
        message,
        fixed_by_edit: false,
    }
}

fn observed(what: &str, machine: &DynamicObject, lb: &LoadBalancerStatus) -> Option<Violation> {
    let identity = Identity::of(machine);
    let mut problems: Vec<String> = Vec::new();
    let lb_label = if lb.name.is_empty() {
        format!("load balancer {}", lb.id)
    } else {
        format!("load balancer {} ({})", lb.name, lb.id)
    };
    if lb.provisioning_status.starts_with("PENDING_") {
        problems.push(format!(
            "the {lb_label} is provisioning_status={}",
            lb.provisioning_status
        ));
    }
    let mut listed = 0usize;
    let mut unlisted = 0usize;
    let mut list = |problems: &mut Vec<String>, text: String| {
        if listed < MAX_LISTED {
            listed += 1;
            problems.push(text);
        } else {
            unlisted += 1;
        }
    };
    for pool in &lb.pools {
        if pool.members.is_empty() {
            continue;
        }
        let pool_label = if pool.name.is_empty() {
            format!("pool {}", pool.id)
        } else {
            format!("pool {}", pool.name)
        };
        let mut own = 0usize;
        let mut serving_others = 0usize;
        let mut serving_own = 0usize;
        for member in &pool.members {
            let mine = identity.owns(pool, member);
            if mine {
                own += 1;
                if serving(pool, member) {
                    serving_own += 1;
                }
                continue;
            }
            if serving(pool, member) {
                serving_others += 1;
            }
            if member.provisioning_status != ACTIVE {
                list(
                    &mut problems,
                    format!("{pool_label}: {}", member.describe()),
                );
            }
        }
        // Without any way to recognise the Machine's member, assume the worst: it is one of
        // the serving members.
        let remaining = if own == 0 && !identity.known() {
            serving_others.saturating_sub(1)
        } else {
            serving_others
        };
        if remaining == 0 {
            let serving_word = if pool.has_monitor {
                "ONLINE"
            } else {
                "ONLINE or NO_MONITOR"
            };
            let text = if serving_own > 0 || (own == 0 && !identity.known() && serving_others > 0) {
                format!(
                    "{pool_label}: this Machine's member is the last one serving \
                     (operating_status {serving_word}); no member would be left: {}",
                    pool.members
                        .iter()
                        .take(MAX_LISTED)
                        .map(MemberStatus::describe)
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            } else {
                format!(
                    "{pool_label}: no other member is serving (operating_status {serving_word}): {}",
                    pool.members
                        .iter()
                        .filter(|m| !identity.owns(pool, m))
                        .take(MAX_LISTED)
                        .map(MemberStatus::describe)
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            };
            list(&mut problems, text);
        }
    }
    if problems.is_empty() {
        return None;
    }
    if unlisted > 0 {
        problems.push(format!("and {unlisted} more"));
    }
    Some(Violation {
        severity: Severity::Deny,
        code: CODE_NOT_READY,
        line: None,
        pointer: None,
        message: format!(
            "Refusing to delete {what}: the API {lb_label} is not ready for it: {}. Deleting a \
             control-plane node while a load-balancer member is pending, failed, or the last one \
             serving can take the cluster API offline ({INCIDENT}: an amphorav2 member stayed \
             PENDING_CREATE while the load balancer was ACTIVE, and every control-plane node was \
             rotated out). Cluster API retries the deletion; it goes through once every other \
             member is ACTIVE and another member is ONLINE.",
            problems.join("; ")
        ),
        fixed_by_edit: false,
    })
}

/// The documentation example: deleting a control-plane Machine while the API load
/// balancer's new member is still PENDING_CREATE (the incident of CAPO #2763).
fn example() -> Example {
    let machine = serde_json::json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "metadata": {"name": "cluster-a-control-plane-b2m4d", "namespace": "cluster-a",
            "labels": {"cluster.x-k8s.io/cluster-name": "cluster-a",
                       "cluster.x-k8s.io/control-plane": ""}},
        "spec": {"clusterName": "cluster-a",
                 "infrastructureRef": {"name": "cluster-a-control-plane-b2m4d"}}});
    let lb = "k8s-clusterapi-cluster-cluster-a-cluster-a-kubeapi";
    let member = |machine: &str, address: &str, prov: &str, op: &str| MemberStatus {
        id: String::new(),
        name: format!("{lb}-6443-{machine}"),
        address: address.to_owned(),
        protocol_port: Some(6443),
        provisioning_status: prov.to_owned(),
        operating_status: op.to_owned(),
    };
    let facts = GuardFacts::Observed(LoadBalancerStatus {
        id: "a7f7b5c4-1e0d-4b8e-9c3f-6d2e1f0a9b87".to_owned(),
        name: lb.to_owned(),
        provisioning_status: "ACTIVE".to_owned(),
        operating_status: "ONLINE".to_owned(),
        pools: vec![PoolStatus {
            id: String::new(),
            name: format!("{lb}-6443"),
            has_monitor: true,
            members: vec![
                member(
                    "cluster-a-control-plane-b2m4d",
                    "10.6.0.11",
                    "ACTIVE",
                    "ONLINE",
                ),
                member(
                    "cluster-a-control-plane-7x9kq",
                    "10.6.0.12",
                    "ACTIVE",
                    "ONLINE",
                ),
                member(
                    "cluster-a-control-plane-n3w01",
                    "10.6.0.13",
                    "PENDING_CREATE",
                    "OFFLINE",
                ),
            ],
        }],
    });
    Example {
        operation: Operation::Delete,
        object: machine,
        facts: Facts::of(FAMILY.id, facts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(labels: serde_json::Value, extra: serde_json::Value) -> DynamicObject {
        let mut v = serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {"name": "m-1", "namespace": "ns", "labels": labels},
            "spec": {"clusterName": "c", "infrastructureRef": {"name": "m-1"}}
        });
        if let (Some(obj), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            for (k, val) in extra {
                obj.insert(k.clone(), val.clone());
            }
        }
        serde_json::from_value(v).unwrap()
    }

    fn gvk() -> GroupVersionKind {
        GroupVersionKind::gvk(CAPI_GROUP, "v1beta1", "Machine")
    }

    fn member(name: &str, addr: &str, prov: &str, op: &str) -> MemberStatus {
        MemberStatus {
            id: format!("id-{name}"),
            name: name.into(),
            address: addr.into(),
            protocol_port: Some(6443),
            provisioning_status: prov.into(),
            operating_status: op.into(),
        }
    }

    fn lb(members: Vec<MemberStatus>) -> GuardFacts {
        GuardFacts::Observed(LoadBalancerStatus {
            id: "lb".into(),
            name: "k".into(),
            provisioning_status: ACTIVE.into(),
            operating_status: ONLINE.into(),
            pools: vec![PoolStatus {
                id: "p".into(),
                name: "k-6443".into(),
                has_monitor: true,
                members,
            }],
        })
    }

    #[test]
    fn worker_machines_are_not_guarded() {
        let m = machine(serde_json::json!({}), serde_json::json!({}));
        let out = check(&gvk(), &m, &lb(vec![]), WhenUnknown::Deny);
        assert!(out.violations.is_empty());
    }

    #[test]
    fn own_member_recognised_by_capo_name() {
        let m = machine(
            serde_json::json!({CONTROL_PLANE_LABEL: ""}),
            serde_json::json!({}),
        );
        let facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, ONLINE),
        ]);
        assert!(
            check(&gvk(), &m, &facts, WhenUnknown::Deny)
                .violations
                .is_empty()
        );
        // A suffix that only looks like the Machine's does not count as its member.
        let facts = lb(vec![
            member("k-6443-xm-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-1", "10.0.0.2", ACTIVE, ONLINE),
        ]);
        assert!(
            check(&gvk(), &m, &facts, WhenUnknown::Deny)
                .violations
                .is_empty()
        );
        let facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, "OFFLINE"),
        ]);
        let out = check(&gvk(), &m, &facts, WhenUnknown::Deny);
        assert_eq!(out.violations.len(), 1);
        assert!(out.violations[0].message.contains("last one serving"));
    }

    #[test]
    fn unidentifiable_machine_assumes_the_worst() {
        let mut m = machine(
            serde_json::json!({CONTROL_PLANE_LABEL: ""}),
            serde_json::json!({}),
        );
        m.data["spec"] = serde_json::json!({});
        let one = lb(vec![member("a", "10.0.0.9", ACTIVE, ONLINE)]);
        assert_eq!(
            check(&gvk(), &m, &one, WhenUnknown::Admit).violations.len(),
            1
        );
        let two = lb(vec![
            member("a", "10.0.0.9", ACTIVE, ONLINE),
            member("b", "10.0.0.8", ACTIVE, ONLINE),
        ]);
        assert!(
            check(&gvk(), &m, &two, WhenUnknown::Admit)
                .violations
                .is_empty()
        );
    }
}
