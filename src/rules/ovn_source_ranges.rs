//! `ovn-source-ranges`: with the OVN Octavia provider, a Service's source ranges are applied
//! only when the CCM manages security groups, and only `SOURCE_IP_PORT` works.
//!
//! Facts (domain-facts §9.1): with `lb-provider = ovn`, `spec.loadBalancerSourceRanges` and
//! the `service.beta.kubernetes.io/load-balancer-source-ranges` annotation are applied only
//! when `manage-security-groups = true`; otherwise the CCM ignores them with only a warning
//! Event (cloud-provider-openstack `pkg/openstack/loadbalancer.go`, around l.1577): the
//! allow-list the user wrote is silently open to the world. Gardener forces security groups on
//! for OVN (gardener-extension-provider-openstack #1398). OVN rejects every algorithm but
//! `SOURCE_IP_PORT` (azimuth-cloud/capi-helm-charts #421, vexxhost/magnum-cluster-api #355),
//! and the per-Service annotation `loadbalancer.openstack.org/lb-method` is honoured from CCM
//! v1.34.0 (PR #2988); earlier versions ignore it.
//!
//! The rule reads a Service and the cluster's cloud config, which is not part of the write: a
//! fact ([`CloudConfigFact`]) that the webhook's cloud-config source keeps from the
//! configured Secret or ConfigMap, and that `check` derives from a cloud config in the same
//! input. Without it the rule says it cannot see the config (a warning), never guesses.

use serde_json::Value;

use super::{
    Check, Example, Facts, Family, NoParams, ObjectInput, RuleId, RuleOutput, Severity, Violation,
    parse_params,
};
use crate::facts::FactId;
pub use crate::facts::cloud_config::{CloudConfigFact, LbSettings};

/// The family: reads Services of type LoadBalancer, with the cluster's cloud config as a fact.
pub static FAMILY: Family = Family {
    id: RuleId::new("ovn-source-ranges"),
    check: Check::Object(check),
    facts: &[FactId::CloudConfig],
    params: &[],
    parse_params: parse_params::<NoParams>,
    codes: &[CODE_IGNORED, CODE_LB_METHOD, CODE_UNSEEN],
    example: || {
        let mut example =
            Example::create(serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "ingress", "namespace": "web"},
            "spec": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["203.0.113.0/24"],
                "ports": [{"port": 443}]}}));
        example.facts = Facts::of(
            FAMILY.id,
            CloudConfigFact::Known(LbSettings::from_ini(
                "Secret kube-system/cloud-config key cloud.conf".to_owned(),
                "[LoadBalancer]\nlb-provider = ovn\nlb-method = SOURCE_IP_PORT\n",
            )),
        );
        Some(example)
    },
    embedded: false,
    default_policy: (
        "ovn-source-ranges.yaml",
        include_str!("../../policies/ovn-source-ranges.yaml"),
    ),
};

/// Source ranges the CCM ignores: OVN without managed security groups.
pub const CODE_IGNORED: &str = "source-ranges-ignored";
/// An `lb-method` annotation other than SOURCE_IP_PORT on OVN.
pub const CODE_LB_METHOD: &str = "ovn-lb-method";
/// The cluster's cloud config is not known, so the rule cannot decide.
pub const CODE_UNSEEN: &str = "cloud-config-unseen";

/// The Service annotation that carries source ranges.
pub const RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
/// The Service annotation that sets the load-balancing algorithm (honoured from CCM v1.34.0).
pub const LB_METHOD_ANNOTATION: &str = "loadbalancer.openstack.org/lb-method";

const SOURCES: &str = "cloud-provider-openstack pkg/openstack/loadbalancer.go (source ranges \
                       need manage-security-groups with OVN); gardener-extension-provider-openstack #1398";
const METHOD_SOURCES: &str = "cloud-provider-openstack PR #2988 (annotation honoured from v1.34.0); \
                              azimuth-cloud/capi-helm-charts #421";

/// What a Service asks of the load balancer, as far as this family reads it.
struct ServiceAsks {
    /// JSON pointer of the source ranges (field or annotation), when set.
    ranges: Option<(String, &'static str)>,
    /// The lb-method annotation's value, when set.
    method: Option<String>,
}

fn service_asks(object: &kube::core::DynamicObject) -> Option<ServiceAsks> {
    let spec = object.data.get("spec")?;
    if spec.get("type").and_then(Value::as_str) != Some("LoadBalancer") {
        return None;
    }
    let annotations = object.metadata.annotations.as_ref();
    let annotation = |key: &str| {
        annotations
            .and_then(|a| a.get(key))
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    };
    let field_ranges = spec
        .get("loadBalancerSourceRanges")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let ranges = if field_ranges {
        Some((
            "/spec/loadBalancerSourceRanges".to_owned(),
            "spec.loadBalancerSourceRanges",
        ))
    } else if annotation(RANGES_ANNOTATION).is_some() {
        Some((
            format!(
                "/metadata/annotations/{}",
                RANGES_ANNOTATION.replace('~', "~0").replace('/', "~1")
            ),
            "the annotation service.beta.kubernetes.io/load-balancer-source-ranges",
        ))
    } else {
        None
    };
    let method = annotation(LB_METHOD_ANNOTATION).map(str::to_owned);
    (ranges.is_some() || method.is_some()).then_some(ServiceAsks { ranges, method })
}

fn check(input: &ObjectInput<'_>) -> RuleOutput {
    let mut out = RuleOutput::default();
    let kind = input.subject.kind;
    if !(kind.group.is_empty() && kind.kind == "Service") {
        return out;
    }
    let Some(asks) = service_asks(input.object) else {
        return out;
    };
    let service = format!(
        "Service {}/{}",
        input.namespace.unwrap_or(""),
        input.object.metadata.name.as_deref().unwrap_or("")
    );
    let settings = match input.context.facts.get::<CloudConfigFact>(FAMILY.id) {
        Some(CloudConfigFact::Known(s)) if s.readable => s,
        Some(CloudConfigFact::Known(s)) => {
            let why = format!("{} is not valid gcfg", s.source);
            out.violations.push(unseen(&service, &asks, &why));
            return out;
        }
        Some(CloudConfigFact::Unavailable(why)) => {
            out.violations.push(unseen(&service, &asks, why));
            return out;
        }
        None => {
            let why = "no cloud config is configured or found for this run";
            out.violations.push(unseen(&service, &asks, why));
            return out;
        }
    };
    if !settings.ovn {
        return out;
    }
    if let Some((pointer, what)) = &asks.ranges
        && !settings.manage_security_groups
    {
        out.violations.push(Violation {
            severity: Severity::Deny,
            code: CODE_IGNORED,
            line: None,
            pointer: Some(pointer.clone()),
            location: Some(format!("{service} {what}")),
            what: "ignored by the CCM: lb-provider = ovn without manage-security-groups".to_owned(),
            fix: "set manage-security-groups = true in the cloud config".to_owned(),
            why: format!(
                "The cluster's cloud config ({}) has [LoadBalancer] lb-provider = ovn without \
                 manage-security-groups = true, so the OpenStack CCM ignores these source ranges \
                 with only a warning Event and the load balancer stays open to every address \
                 ({SOURCES}). Set manage-security-groups = true under [LoadBalancer] in {} (the \
                 CCM reads it at start: restart it), or drop the ranges and restrict access \
                 another way.",
                settings.source, settings.source
            ),
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    if let Some(method) = &asks.method
        && method != "SOURCE_IP_PORT"
    {
        let shown: String = method.chars().take(40).collect();
        out.violations.push(Violation {
            severity: Severity::Deny,
            code: CODE_LB_METHOD,
            line: None,
            pointer: Some(format!(
                "/metadata/annotations/{}",
                LB_METHOD_ANNOTATION.replace('/', "~1")
            )),
            location: Some(format!("{service} annotation {LB_METHOD_ANNOTATION}")),
            what: format!("{shown:?} with lb-provider = ovn, which supports only SOURCE_IP_PORT"),
            fix: "set it to SOURCE_IP_PORT or remove it".to_owned(),
            why: format!(
                "The cluster's cloud config ({}) uses lb-provider = ovn, and Octavia's OVN \
                 provider supports only SOURCE_IP_PORT. The OpenStack CCM honours this \
                 annotation from v1.34.0, where the load balancer then fails to be created; \
                 earlier versions ignore the annotation and use the config's lb-method \
                 ({METHOD_SOURCES}).",
                settings.source
            ),
            notes: Vec::new(),
            unseen_overlay: None,
            fixed_by_edit: false,
        });
    }
    out
}

fn unseen(service: &str, asks: &ServiceAsks, why: &str) -> Violation {
    let (pointer, what) = match (&asks.ranges, &asks.method) {
        (Some((pointer, what)), _) => (pointer.clone(), (*what).to_owned()),
        (None, _) => (
            format!(
                "/metadata/annotations/{}",
                LB_METHOD_ANNOTATION.replace('/', "~1")
            ),
            format!("annotation {LB_METHOD_ANNOTATION}"),
        ),
    };
    Violation {
        severity: Severity::Warn,
        code: CODE_UNSEEN,
        line: None,
        pointer: Some(pointer),
        location: Some(format!("{service} {what}")),
        what: format!("stackgate cannot see the cluster's cloud config ({why})"),
        fix: "check the cluster's [LoadBalancer] settings".to_owned(),
        why: format!(
            "So stackgate cannot tell whether the load balancer uses the OVN provider. With \
             lb-provider = ovn and no manage-security-groups = true the CCM ignores source \
             ranges (the load balancer is open to every address), and OVN supports only the \
             SOURCE_IP_PORT lb-method ({SOURCES})."
        ),
        notes: Vec::new(),
        unseen_overlay: None,
        fixed_by_edit: false,
    }
}
