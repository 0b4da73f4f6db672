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
//! (`crate::guard`) gathered before evaluation. Each pool is judged by what the deletion
//! changes there: a pool where the deleted Machine's member is not serving (or where nothing
//! serves at all, e.g. an `additionalPorts` pool whose service is down) is left alone. Where
//! the deletion removes a serving member, it denies when
//! - no member of another Machine that stays would be serving afterwards: serving is
//!   `operating_status = ONLINE`, or `NO_MONITOR` when the pool has no health monitor
//!   (Octavia reports `NO_MONITOR` for members it does not probe); members of the cluster's
//!   other control-plane Machines that are being deleted, or whose DELETE this replica
//!   admitted moments ago, do not count as serving (their members still show ONLINE);
//! - another member of the pool is not `provisioning_status = ACTIVE` (a change is in flight,
//!   or failed), or the load balancer itself is `PENDING_*`.
//!
//! The deleted Machine's own member is not required to be `ACTIVE`: its state does not change
//! what keeps serving once it is gone, and requiring it would block the remediation of a
//! Machine whose member is in `ERROR`.
//!
//! When the facts are unavailable (including a DELETE review without `oldObject` whose
//! Machine could not be read) the policy's `params.unknown` decides: `admit` (default)
//! admits with a warning, `deny` refuses. Cluster API retries a refused deletion; which
//! Cluster API versions that is harmless with is in docs/operations.md.

use std::fmt::Write as _;
use std::net::IpAddr;

use kube::core::{DynamicObject, GroupVersionKind};
use serde::{Deserialize, Serialize};

use super::{
    Check, Example, Facts, Family, ObjectInput, Operation, RuleId, RuleOutput, Severity, Subject,
    Violation, parse_params,
};
use crate::facts::FactId;
use crate::short_text::ShortText;

/// The family: reads control-plane Machine DELETEs, with the load-balancer facts the guard
/// adapter (`crate::guard`) gathers before evaluation.
pub static FAMILY: Family = Family {
    id: RuleId::new("control-plane-lb-guard"),
    check: Check::Delete(check_delete),
    facts: &[FactId::ControlPlaneLoadBalancer],
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
    let machine = input.subject.old_object.is_some().then_some(input.object);
    check(input.subject, machine, facts, unknown)
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
    /// infrastructure is not OpenStack, the Machine read from the API is not a control-plane
    /// one, ...). `reason` says which.
    NotApplicable {
        /// Why, for logs.
        reason: String,
    },
    /// The load balancer's status tree as Octavia reported it, with what else is leaving.
    Observed(Observation),
    /// The facts could not be gathered. `reason` is safe to show: it never holds a credential.
    Unavailable {
        /// What failed, e.g. "Keystone did not answer within 800ms".
        reason: String,
    },
}

/// What the guard saw for one deletion.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// The API load balancer's status tree, read from Octavia for this review (a cached tree
    /// is only ever used when it already refuses the deletion).
    pub load_balancer: LoadBalancerStatus,
    /// The deleted Machine as the Kubernetes API serves it, when the review carried no
    /// `oldObject` (the review's own object is used otherwise).
    pub machine: Option<MachineIdentity>,
    /// The cluster's other control-plane Machines on their way out: their members still show
    /// ONLINE in Octavia, but they will not be serving for long, so none of them counts as
    /// serving.
    pub leaving: Vec<Leaving>,
}

impl Observation {
    /// An observation of `load_balancer` with nothing else leaving.
    pub fn of(load_balancer: LoadBalancerStatus) -> Self {
        Self {
            load_balancer,
            ..Self::default()
        }
    }
}

/// Another control-plane Machine of the same cluster that is leaving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaving {
    /// How its member can be recognised (digests: the guard's ledger keeps no request text).
    pub machine: MachineDigest,
    /// Its name, when this review read it from the API (a Machine being deleted); a Machine
    /// known only from the ledger of admitted deletions is counted, not named.
    pub name: Option<ShortText>,
    /// Why it counts as leaving.
    pub why: LeavingWhy,
}

/// A SHA-256 digest: what identity comparisons of untrusted strings keep, fixed in size
/// whatever the string's length (a std hasher's 64 bits would let a tenant craft collisions).
pub type Sha256 = [u8; 32];

/// The SHA-256 of `text` (`ring::digest`).
pub fn sha256(text: &str) -> Sha256 {
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// What identifies a Machine's members, as digests ([`MachineIdentity::digest`]): the size
/// is fixed by [`MAX_MACHINE_ADDRESSES`], not by the request, and comparing two is comparing
/// the strings they were made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineDigest {
    /// Of `metadata.name`.
    pub name: Sha256,
    /// Of each address in [`normalise_address`]'s form (at most [`MAX_MACHINE_ADDRESSES`]).
    pub addresses: Vec<Sha256>,
    /// Of `spec.infrastructureRef.name`.
    pub infra_name: Option<Sha256>,
}

impl MachineDigest {
    /// [`MachineIdentity::owns`], on digests.
    pub fn owns(&self, pool: &PoolStatus, member: &MemberStatus) -> bool {
        if let (Some(infra), Some(suffix)) = (&self.infra_name, capo_member_suffix(pool, member)) {
            return *infra == sha256(suffix);
        }
        if member.address.is_empty() {
            return false;
        }
        let address = sha256(&normalise_address(&member.address));
        self.addresses.contains(&address)
    }
}

/// Why a Machine counts as leaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeavingWhy {
    /// Its `metadata.deletionTimestamp` is set.
    Deleting,
    /// This replica admitted a DELETE of it moments ago (it may not show a
    /// deletionTimestamp yet).
    JustAdmitted,
}

/// How a Machine's own pool members are recognised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineIdentity {
    /// Machine name.
    pub name: String,
    /// `status.addresses[*].address`, as written.
    pub addresses: Vec<String>,
    /// `spec.infrastructureRef.name`: the OpenStackMachine, after which CAPO names the
    /// members (`<pool name>-<OpenStackMachine name>`).
    pub infra_name: Option<String>,
}

/// Most addresses read from one Machine (a node has a handful).
pub const MAX_MACHINE_ADDRESSES: usize = 32;

impl MachineIdentity {
    /// The identity of a Machine object (`metadata.name`, `status.addresses`,
    /// `spec.infrastructureRef.name`), from its JSON.
    pub fn from_json(machine: &serde_json::Value) -> Self {
        let name = machine
            .pointer("/metadata/name")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        Self::from_parts(name, machine)
    }

    /// [`Self::from_json`] of a decoded object (its `data` holds spec and status).
    pub fn of(machine: &DynamicObject) -> Self {
        Self::from_parts(
            machine.metadata.name.clone().unwrap_or_default(),
            &machine.data,
        )
    }

    fn from_parts(name: String, data: &serde_json::Value) -> Self {
        let addresses = data
            .pointer("/status/addresses")
            .and_then(|a| a.as_array())
            .into_iter()
            .flatten()
            .filter_map(|a| a.get("address").and_then(|v| v.as_str()))
            .filter(|a| !a.is_empty())
            .take(MAX_MACHINE_ADDRESSES)
            .map(str::to_owned)
            .collect();
        let infra_name = data
            .pointer("/spec/infrastructureRef/name")
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Self {
            name,
            addresses,
            infra_name,
        }
    }

    /// Its digests: what a record of it keeps ([`MachineDigest`]).
    pub fn digest(&self) -> MachineDigest {
        let mut addresses: Vec<Sha256> =
            Vec::with_capacity(self.addresses.len().min(MAX_MACHINE_ADDRESSES));
        for address in self.addresses.iter().take(MAX_MACHINE_ADDRESSES) {
            addresses.push(sha256(&normalise_address(address)));
        }
        MachineDigest {
            name: sha256(&self.name),
            addresses,
            infra_name: self.infra_name.as_deref().map(sha256),
        }
    }

    fn known(&self) -> bool {
        !self.addresses.is_empty() || self.infra_name.is_some()
    }

    /// Whether `member` of `pool` is this Machine's. CAPO names each member
    /// `<pool name>-<OpenStackMachine name>` (ReconcileLoadBalancerMember in
    /// kubernetes-sigs/cluster-api-provider-openstack e52de58abe6f70f4ad3ad7f7f51632bfd70354b7,
    /// `pkg/cloud/services/loadbalancer/loadbalancer.go`); when both that name and the
    /// Machine's infrastructure name are known, the name alone decides (an address can be
    /// reused by a replacement). Otherwise the member's address is compared with the
    /// Machine's addresses as IP addresses (case, zero compression, IPv4-mapped IPv6).
    pub fn owns(&self, pool: &PoolStatus, member: &MemberStatus) -> bool {
        if let (Some(infra), Some(suffix)) = (&self.infra_name, capo_member_suffix(pool, member)) {
            return infra == suffix;
        }
        if member.address.is_empty() {
            return false;
        }
        let address = normalise_address(&member.address);
        self.addresses
            .iter()
            .any(|a| normalise_address(a) == address)
    }
}

/// The OpenStackMachine name in a member named the CAPO way, `<pool name>-<name>`.
fn capo_member_suffix<'a>(pool: &PoolStatus, member: &'a MemberStatus) -> Option<&'a str> {
    if pool.name.is_empty() {
        return None;
    }
    member
        .name
        .strip_prefix(pool.name.as_str())?
        .strip_prefix('-')
        .filter(|rest| !rest.is_empty())
}

/// An address in one canonical form: IP addresses parsed (`std::net::IpAddr`) and printed
/// again, IPv4-mapped IPv6 (`::ffff:10.0.0.1`) as IPv4; anything else lower-cased.
pub fn normalise_address(address: &str) -> String {
    let trimmed = address.trim();
    // Octavia and Kubernetes never bracket addresses, but a zone or brackets would not parse.
    let bare = trimmed
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(trimmed);
    match bare.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        Ok(ip) => ip.to_string(),
        Err(_) => trimmed.to_ascii_lowercase(),
    }
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
            (false, Some(port)) if self.address.contains(':') => {
                format!(" ([{}]:{port})", self.address)
            }
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
    is_machine(kind)
        && object
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL))
}

fn is_machine(kind: &GroupVersionKind) -> bool {
    kind.group == CAPI_GROUP && kind.kind == "Machine"
}

fn serving(pool: &PoolStatus, member: &MemberStatus) -> bool {
    member.provisioning_status == ACTIVE
        && (member.operating_status == ONLINE
            || (!pool.has_monitor && member.operating_status == NO_MONITOR))
}

/// Decides one control-plane Machine DELETE. `machine` is the request's `oldObject` (None
/// when the review carried none: then the gathered facts say what the Machine is).
/// Returns no violation for anything that is not a control-plane Machine.
pub fn check(
    subject: &Subject<'_>,
    machine: Option<&DynamicObject>,
    facts: &GuardFacts,
    unknown: WhenUnknown,
) -> RuleOutput {
    let (what, identity) = match machine {
        Some(machine) => {
            if !is_control_plane_machine(subject.kind, machine) {
                return RuleOutput::default();
            }
            (describe_machine(machine), MachineIdentity::of(machine))
        }
        // Without the stored object only the gathered facts can tell what the Machine is:
        // the adapter read it from the API (Observed), found it is not a control-plane one
        // (NotApplicable), or could not tell (Unavailable, which params.unknown decides).
        None => {
            if !is_machine(subject.kind) {
                return RuleOutput::default();
            }
            let name = if subject.name.is_empty() {
                "<unnamed>"
            } else {
                subject.name.as_str()
            };
            let what = match &subject.namespace {
                Some(ns) => format!("Machine {ns}/{name}"),
                None => format!("Machine {name}"),
            };
            let identity = match facts {
                GuardFacts::Observed(o) => o.machine.clone().unwrap_or_default(),
                _ => MachineIdentity::default(),
            };
            (what, identity)
        }
    };
    let violation = match facts {
        GuardFacts::NotApplicable { .. } => None,
        GuardFacts::Unavailable { reason } => Some(unavailable(&what, reason, unknown)),
        GuardFacts::Observed(observation) => {
            let problems = assess(&identity, observation);
            (!problems.is_empty()).then(|| refusal(&what, &observation.load_balancer, problems))
        }
    };
    RuleOutput {
        violations: violation.into_iter().collect(),
        ..RuleOutput::default()
    }
}

/// Whether the guard refuses deleting `machine` given `observation`: the adapter asks this
/// before it reuses a cached status tree (a cached tree may only ever refuse).
pub fn refuses(machine: &MachineIdentity, observation: &Observation) -> bool {
    !assess(machine, observation).is_empty()
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
    // The first line names the outcome (admitted or refused) and the Machine; the reason
    // follows.
    let (severity, short, fix, why) = match unknown {
        WhenUnknown::Admit => (
            Severity::Warn,
            "Admitted without checking the API load balancer (params.unknown is admit)".to_owned(),
            "check that every member is ACTIVE and another one is ONLINE",
            format!(
                "{reason}. Deleting {what} while a load-balancer member is pending or the last \
                 one serving can take the cluster API offline ({INCIDENT})."
            ),
        ),
        WhenUnknown::Deny => (
            Severity::Deny,
            format!("Refusing to delete {what}: the API load balancer could not be checked"),
            "wait; Cluster API retries the deletion",
            format!(
                "params.unknown is deny: {reason}. Deleting a control-plane node while a \
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
        location: None,
        what: short,
        fix: fix.to_owned(),
        why,
        notes: Vec::new(),
        unseen_overlay: None,
        fixed_by_edit: false,
    }
}

fn lb_label(lb: &LoadBalancerStatus) -> String {
    if lb.name.is_empty() {
        format!("load balancer {}", lb.id)
    } else {
        format!("load balancer {} ({})", lb.name, lb.id)
    }
}

/// Bounded list of problem texts: the first [`MAX_LISTED`], then a count.
#[derive(Default)]
struct Problems {
    listed: Vec<String>,
    unlisted: usize,
}

impl Problems {
    fn push(&mut self, text: String) {
        if self.listed.len() < MAX_LISTED {
            self.listed.push(text);
        } else {
            self.unlisted += 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }
}

/// Whose a member is, for one deletion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// The deleted Machine's.
    Mine,
    /// Another control-plane Machine's that is leaving.
    Leaving,
    /// Anyone else's (it stays).
    Staying,
}

/// Judges each pool by what the deletion changes: a pool where the deleted Machine's member
/// is not serving (or that has nothing serving at all, such as an `additionalPorts` pool
/// whose service is down) cannot be made worse by it and never refuses. A pool that loses a
/// serving member refuses when nothing staying would serve afterwards, or when a change is in
/// flight (another member not ACTIVE, or the load balancer PENDING_*).
fn assess(me: &MachineIdentity, observation: &Observation) -> Problems {
    let lb = &observation.load_balancer;
    let mut problems = Problems::default();
    let mut affected_any = false;
    for pool in &lb.pools {
        if pool.members.is_empty() {
            continue;
        }
        let owners: Vec<Owner> = pool
            .members
            .iter()
            .map(|m| {
                if me.owns(pool, m) {
                    Owner::Mine
                } else if observation.leaving.iter().any(|l| l.machine.owns(pool, m)) {
                    Owner::Leaving
                } else {
                    Owner::Staying
                }
            })
            .collect();
        let count = |owner: Owner| {
            pool.members
                .iter()
                .zip(&owners)
                .filter(|(m, o)| **o == owner && serving(pool, m))
                .count()
        };
        let (mine_serving, staying_serving) = (count(Owner::Mine), count(Owner::Staying));
        let leaving_serving = count(Owner::Leaving);
        // Without any way to recognise the Machine's member, assume the worst: it is one of
        // the serving members.
        let unrecognised = !me.known() && !owners.contains(&Owner::Mine);
        let (before, after) = if unrecognised {
            (staying_serving, staying_serving.saturating_sub(1))
        } else {
            (mine_serving + staying_serving, staying_serving)
        };
        if after >= before {
            continue;
        }
        affected_any = true;
        let pool_label = if pool.name.is_empty() {
            format!("pool {}", pool.id)
        } else {
            format!("pool {}", pool.name)
        };
        for (member, owner) in pool.members.iter().zip(&owners) {
            if *owner != Owner::Mine && member.provisioning_status != ACTIVE {
                problems.push(format!("{pool_label}: {}", member.describe()));
            }
        }
        if after == 0 {
            let serving_word = if pool.has_monitor {
                "ONLINE"
            } else {
                "ONLINE or NO_MONITOR"
            };
            let whose = if unrecognised {
                "the Machine's member cannot be told apart (no status.addresses and no \
                 spec.infrastructureRef) and only one member is serving"
                    .to_owned()
            } else {
                format!(
                    "this Machine's member is the last one serving (operating_status {serving_word})"
                )
            };
            let leaving_note = if leaving_serving > 0 {
                let serving_leaving: Vec<&Leaving> = observation
                    .leaving
                    .iter()
                    .filter(|l| {
                        pool.members
                            .iter()
                            .any(|m| serving(pool, m) && l.machine.owns(pool, m))
                    })
                    .collect();
                let mut named: Vec<String> = serving_leaving
                    .iter()
                    .filter_map(|l| l.name.as_ref().map(ShortText::to_string))
                    .take(MAX_LISTED)
                    .collect();
                // Machines known only from the ledger have no name to show: the ledger keeps
                // digests, and a name shown must come from this review.
                let unnamed = serving_leaving.iter().filter(|l| l.name.is_none()).count();
                if unnamed > 0 {
                    named.push(format!(
                        "{unnamed} whose deletion this replica admitted moments ago"
                    ));
                }
                format!(
                    " once the members of control-plane Machines already being deleted are \
                     gone ({})",
                    named.join(", ")
                )
            } else {
                String::new()
            };
            problems.push(format!(
                "{pool_label}: {whose}{leaving_note}; no member would be left: {}",
                pool.members
                    .iter()
                    .take(MAX_LISTED)
                    .map(MemberStatus::describe)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    if affected_any && lb.provisioning_status.starts_with("PENDING_") {
        problems.listed.insert(
            0,
            format!(
                "the {} is provisioning_status={}",
                lb_label(lb),
                lb.provisioning_status
            ),
        );
    }
    problems
}

fn refusal(what: &str, lb: &LoadBalancerStatus, problems: Problems) -> Violation {
    let mut listed = problems.listed;
    if problems.unlisted > 0 {
        listed.push(format!("and {} more", problems.unlisted));
    }
    Violation {
        severity: Severity::Deny,
        code: CODE_NOT_READY,
        line: None,
        pointer: None,
        location: None,
        what: format!("Refusing to delete {what}: an API load-balancer member is not ready"),
        fix: "wait; Cluster API retries the deletion".to_owned(),
        why: format!(
            "The API {} is not ready for it: {}. Deleting a control-plane node while a \
             load-balancer member is pending, failed, or the last one serving can take the \
             cluster API offline ({INCIDENT}: an amphorav2 member stayed PENDING_CREATE while \
             the load balancer was ACTIVE, and every control-plane node was rotated out). \
             Cluster API retries the deletion; it goes through once every other member is \
             ACTIVE and another member is ONLINE.",
            lb_label(lb),
            listed.join("; ")
        ),
        notes: Vec::new(),
        unseen_overlay: None,
        fixed_by_edit: false,
    }
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
    let facts = GuardFacts::Observed(Observation::of(LoadBalancerStatus {
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
    }));
    Example {
        operation: Operation::Delete,
        object: machine,
        facts: Facts::of(FAMILY.id, facts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::short_text::ShortText;

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

    fn run(m: &DynamicObject, facts: &GuardFacts, unknown: WhenUnknown) -> RuleOutput {
        let kind = gvk();
        let subject = Subject {
            operation: Operation::Delete,
            kind: &kind,
            namespace: Some(ShortText::name("ns")),
            name: ShortText::name("m-1"),
            subresource: None,
            object: None,
            old_object: Some(m),
            dry_run: false,
            requester: crate::rules::Requester::Unknown,
        };
        check(&subject, Some(m), facts, unknown)
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
        GuardFacts::Observed(Observation::of(LoadBalancerStatus {
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
        }))
    }

    fn cp() -> DynamicObject {
        machine(
            serde_json::json!({CONTROL_PLANE_LABEL: ""}),
            serde_json::json!({}),
        )
    }

    #[test]
    fn worker_machines_are_not_guarded() {
        let m = machine(serde_json::json!({}), serde_json::json!({}));
        let out = run(&m, &lb(vec![]), WhenUnknown::Deny);
        assert!(out.violations.is_empty());
    }

    #[test]
    fn own_member_recognised_by_capo_name() {
        let m = cp();
        let facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, ONLINE),
        ]);
        assert!(run(&m, &facts, WhenUnknown::Deny).violations.is_empty());
        // A suffix that only looks like the Machine's does not count as its member.
        let facts = lb(vec![
            member("k-6443-xm-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-1", "10.0.0.2", ACTIVE, ONLINE),
        ]);
        assert!(run(&m, &facts, WhenUnknown::Deny).violations.is_empty());
        let facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, "OFFLINE"),
        ]);
        let out = run(&m, &facts, WhenUnknown::Deny);
        assert_eq!(out.violations.len(), 1);
        assert!(out.violations[0].message().contains("last one serving"));
    }

    #[test]
    fn the_capo_name_wins_over_an_address() {
        // The Machine's old address now belongs to a replacement's member (CAPO-named after
        // another OpenStackMachine): it is not this Machine's member.
        let m = machine(
            serde_json::json!({CONTROL_PLANE_LABEL: ""}),
            serde_json::json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
        );
        let facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, ONLINE),
        ]);
        assert!(run(&m, &facts, WhenUnknown::Deny).violations.is_empty());
        let facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, "OFFLINE"),
        ]);
        assert_eq!(run(&m, &facts, WhenUnknown::Deny).violations.len(), 1);
    }

    #[test]
    fn addresses_are_compared_as_ip_addresses() {
        assert_eq!(normalise_address("2001:DB8:0:0::1"), "2001:db8::1");
        assert_eq!(normalise_address("::ffff:10.0.0.1"), "10.0.0.1");
        assert_eq!(normalise_address("::FFFF:0a00:0001"), "10.0.0.1");
        assert_eq!(normalise_address(" 10.0.0.1 "), "10.0.0.1");
        assert_eq!(normalise_address("[fe80::1]"), "fe80::1");
        assert_eq!(normalise_address("Node-1.Example"), "node-1.example");
        let me = MachineIdentity {
            name: "m".into(),
            addresses: vec!["node-1".into(), "2001:db8::a".into(), "10.0.0.7".into()],
            infra_name: None,
        };
        let pool = PoolStatus {
            name: "k-6443".into(),
            ..PoolStatus::default()
        };
        let at = |a: &str| member("other-name", a, ACTIVE, ONLINE);
        assert!(me.owns(&pool, &at("2001:0DB8:0000::000A")));
        assert!(me.owns(&pool, &at("::ffff:10.0.0.7")));
        assert!(!me.owns(&pool, &at("10.0.0.70")));
        assert!(!me.owns(&pool, &at("")));
    }

    #[test]
    fn unidentifiable_machine_assumes_the_worst() {
        let mut m = cp();
        m.data["spec"] = serde_json::json!({});
        let one = lb(vec![member("a", "10.0.0.9", ACTIVE, ONLINE)]);
        let out = run(&m, &one, WhenUnknown::Admit);
        assert_eq!(out.violations.len(), 1);
        assert!(out.violations[0].message().contains("cannot be told apart"));
        let two = lb(vec![
            member("a", "10.0.0.9", ACTIVE, ONLINE),
            member("b", "10.0.0.8", ACTIVE, ONLINE),
        ]);
        assert!(run(&m, &two, WhenUnknown::Admit).violations.is_empty());
    }

    #[test]
    fn leaving_machines_do_not_count_as_serving() {
        let m = cp();
        let mut facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, ONLINE),
            member("k-6443-m-3", "10.0.0.3", ACTIVE, ONLINE),
        ]);
        assert!(run(&m, &facts, WhenUnknown::Deny).violations.is_empty());
        let leaving = |name: &str, why| Leaving {
            machine: MachineIdentity {
                name: name.into(),
                addresses: vec![],
                infra_name: Some(name.into()),
            }
            .digest(),
            name: (why == LeavingWhy::Deleting).then(|| ShortText::name(name)),
            why,
        };
        let GuardFacts::Observed(o) = &mut facts else {
            unreachable!()
        };
        o.leaving.push(leaving("m-2", LeavingWhy::Deleting));
        assert!(run(&m, &facts, WhenUnknown::Deny).violations.is_empty());
        let GuardFacts::Observed(o) = &mut facts else {
            unreachable!()
        };
        o.leaving.push(leaving("m-3", LeavingWhy::JustAdmitted));
        let out = run(&m, &facts, WhenUnknown::Deny);
        assert_eq!(out.violations.len(), 1);
        let message = &out.violations[0].message();
        assert!(
            message.contains(
                "already being deleted are gone (m-2, 1 whose deletion this replica admitted \
                 moments ago)"
            ),
            "{message}"
        );
        let GuardFacts::Observed(o) = &facts else {
            unreachable!()
        };
        assert!(refuses(&MachineIdentity::of(&m), o));
    }

    #[test]
    fn a_pool_the_deletion_does_not_change_never_refuses() {
        let m = cp();
        let mut facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, ONLINE),
        ]);
        let GuardFacts::Observed(o) = &mut facts else {
            unreachable!()
        };
        // An additionalPorts pool whose service runs nowhere: every member ERROR.
        o.load_balancer.pools.push(PoolStatus {
            id: "p2".into(),
            name: "k-8132".into(),
            has_monitor: true,
            members: vec![
                member("k-8132-m-1", "10.0.0.1", ACTIVE, "ERROR"),
                member("k-8132-m-2", "10.0.0.2", ACTIVE, "ERROR"),
            ],
        });
        assert!(run(&m, &facts, WhenUnknown::Deny).violations.is_empty());
        // The Machine's own member there is the last ONLINE one: that pool refuses, by name.
        let GuardFacts::Observed(o) = &mut facts else {
            unreachable!()
        };
        o.load_balancer.pools[1].members[0].operating_status = ONLINE.into();
        let out = run(&m, &facts, WhenUnknown::Deny);
        assert_eq!(out.violations.len(), 1);
        assert!(
            out.violations[0]
                .message()
                .contains("pool k-8132: this Machine's member is the last one serving"),
            "{}",
            out.violations[0].message()
        );
        assert!(!out.violations[0].message().contains("pool k-6443"));
    }

    #[test]
    fn a_change_in_flight_refuses_only_where_the_deletion_removes_a_serving_member() {
        let m = cp();
        // Own member OFFLINE (remediation): a pending replacement does not stop it.
        let facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, "OFFLINE"),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, ONLINE),
            member("k-6443-m-3", "10.0.0.3", "PENDING_CREATE", "OFFLINE"),
        ]);
        assert!(run(&m, &facts, WhenUnknown::Deny).violations.is_empty());
        // Own member ONLINE: the pending replacement refuses (the incident).
        let facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, ONLINE),
            member("k-6443-m-3", "10.0.0.3", "PENDING_CREATE", "OFFLINE"),
        ]);
        let out = run(&m, &facts, WhenUnknown::Deny);
        assert!(out.violations[0].message().contains("PENDING_CREATE"));
    }

    #[test]
    fn without_old_object_the_facts_decide() {
        let kind = gvk();
        let subject = Subject {
            operation: Operation::Delete,
            kind: &kind,
            namespace: Some(ShortText::name("ns")),
            name: ShortText::name("m-1"),
            subresource: None,
            object: None,
            old_object: None,
            dry_run: false,
            requester: crate::rules::Requester::Unknown,
        };
        let unavailable = GuardFacts::Unavailable {
            reason: "the review carries no oldObject".into(),
        };
        let out = check(&subject, None, &unavailable, WhenUnknown::Deny);
        assert_eq!(out.violations[0].severity, Severity::Deny);
        assert!(out.violations[0].message().contains("Machine ns/m-1"));
        let out = check(&subject, None, &unavailable, WhenUnknown::Admit);
        assert_eq!(out.violations[0].severity, Severity::Warn);
        let worker = GuardFacts::NotApplicable {
            reason: "not a control-plane Machine".into(),
        };
        assert!(
            check(&subject, None, &worker, WhenUnknown::Deny)
                .violations
                .is_empty()
        );
        // Read from the API: judged with the identity read there.
        let mut facts = lb(vec![
            member("k-6443-m-1", "10.0.0.1", ACTIVE, ONLINE),
            member("k-6443-m-2", "10.0.0.2", ACTIVE, "OFFLINE"),
        ]);
        let GuardFacts::Observed(o) = &mut facts else {
            unreachable!()
        };
        o.machine = Some(MachineIdentity {
            name: "m-1".into(),
            addresses: vec![],
            infra_name: Some("m-1".into()),
        });
        let out = check(&subject, None, &facts, WhenUnknown::Admit);
        assert!(out.violations[0].message().contains("last one serving"));
    }
}
