//! Kubernetes lookups: Machine → Cluster → OpenStackCluster (load-balancer id, identityRef)
//! → identity Secret (clouds.yaml, cacert), directly (`type: Secret`) or through a
//! cluster-scoped OpenStackClusterIdentity (`type: ClusterIdentity`, CAPO ≥ v0.14); and the
//! cluster's control-plane Machines that are being deleted.
//!
//! Every read is a single `GET` (or one list page) bounded by the request deadline. The
//! Cluster, its infrastructure object and a `type: Secret` identity live in the Machine's
//! namespace; an OpenStackClusterIdentity names its Secret's namespace itself. Names read
//! from objects are checked to be Kubernetes names before they go into a URL.

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use super::clouds::CloudAuth;
use super::error::{GuardError, kube_reason};
use super::probe::{MachineDelete, control_plane_cluster};
use crate::rules::lb_guard::{
    CAPI_GROUP, CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, MachineIdentity,
};

/// API group of CAPO's infrastructure objects.
pub const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// OpenStackCluster versions tried when a reference names only the group (v1beta2 first:
/// it is the storage version since CAPO v0.15).
const OSC_VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];
/// The one served version of OpenStackClusterIdentity (`api/v1alpha1` in CAPO).
const CLUSTER_IDENTITY_VERSION: &str = "v1alpha1";
/// Control-plane Machines listed per cluster (one page): a control plane has a handful.
pub const MAX_CONTROL_PLANE_MACHINES: u32 = 100;
/// Entries of a label selector evaluated (matchLabels plus matchExpressions values).
const MAX_SELECTOR_TERMS: usize = 256;

/// Where the guard finds the load balancer and the credentials of a Machine's cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `namespace/name` of the OpenStackCluster, for messages.
    pub openstack_cluster: String,
    /// Octavia load-balancer id.
    pub lb_id: String,
    /// Namespace of the Machine (and of the OpenStackCluster).
    pub namespace: String,
    /// Where the credentials are.
    pub identity: IdentityRef,
    /// `identityRef.cloudName`.
    pub cloud_name: String,
    /// `identityRef.region`, when set.
    pub region: Option<String>,
}

/// `spec.identityRef` of an OpenStackCluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IdentityRef {
    /// `type: Secret` (the default): a Secret in the OpenStackCluster's namespace.
    Secret(String),
    /// `type: ClusterIdentity`: an OpenStackClusterIdentity, whose `spec.secretRef` names
    /// the Secret and its namespace.
    ClusterIdentity(String),
}

/// The outcome of the Kubernetes lookups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Check this load balancer.
    Guard(Target),
    /// Nothing to guard, and why.
    NotApplicable(String),
}

/// Identifies one set of credentials without holding any: the Secret's uid and
/// resourceVersion change whenever its content does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CredentialKey {
    secret: String,
    uid: String,
    resource_version: String,
    cloud: String,
    region: Option<String>,
}

/// Credentials read from the identity Secret.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    /// Parsed clouds.yaml entry.
    pub auth: CloudAuth,
    /// PEM CA bundle from the Secret's `cacert` key.
    pub cacert: Option<Vec<u8>>,
    /// Cache key.
    pub key: CredentialKey,
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: format!("{group}/{version}"),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

/// A DNS-1123 subdomain, which every namespaced object name is.
fn is_object_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

async fn get<K>(
    api: &Api<K>,
    what: &'static str,
    namespace: &str,
    name: &str,
    deadline: Instant,
) -> Result<Option<K>, GuardError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let err_name = || (namespace.to_owned(), name.to_owned());
    match timeout_at(deadline, api.get_opt(name)).await {
        Ok(Ok(object)) => Ok(object),
        Ok(Err(e)) => {
            let (namespace, name) = err_name();
            Err(GuardError::Kube {
                what,
                namespace,
                name,
                reason: kube_reason(&e),
            })
        }
        Err(_) => {
            let (namespace, name) = err_name();
            Err(GuardError::KubeTimeout {
                what,
                namespace,
                name,
            })
        }
    }
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// CAPO's `IsEnabled`: the load-balancer spec is present and `enabled` is not false.
fn lb_enabled(spec: Option<&Value>) -> bool {
    match spec {
        Some(Value::Object(o)) => o.get("enabled").and_then(Value::as_bool) != Some(false),
        _ => false,
    }
}

/// Machine → Cluster → OpenStackCluster.
pub(crate) async fn resolve(
    client: &Client,
    machine: &MachineDelete,
    deadline: Instant,
) -> Result<Resolved, GuardError> {
    let ns = machine.namespace.as_str();
    let cluster_name = machine
        .cluster
        .as_deref()
        .ok_or(GuardError::NoClusterName)?;
    if !is_object_name(cluster_name) {
        return Err(GuardError::NoClusterName);
    }
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &resource(CAPI_GROUP, &machine.version, "Cluster", "clusters"),
    );
    // 404 is not "nothing to guard": the version asked for may not be served, or the label
    // may name the wrong Cluster. It is unknown, and params.unknown decides.
    let Some(cluster) = get(&clusters, "Cluster", ns, cluster_name, deadline).await? else {
        return Err(GuardError::NotFound {
            what: "Cluster",
            api_version: format!("{CAPI_GROUP}/{}", machine.version),
            namespace: ns.to_owned(),
            name: cluster_name.to_owned(),
        });
    };
    if cluster.metadata.deletion_timestamp.is_some() {
        return Ok(Resolved::NotApplicable(format!(
            "Cluster {ns}/{cluster_name} is being deleted"
        )));
    }
    let infra = cluster.data.pointer("/spec/infrastructureRef");
    let infra_kind = infra.and_then(|r| str_at(r, "/kind"));
    // v1beta1: apiVersion "group/version"; v1beta2: apiGroup only.
    let (infra_group, infra_version) = match infra.and_then(|r| str_at(r, "/apiVersion")) {
        Some(av) => match av.split_once('/') {
            Some((g, v)) => (Some(g), Some(v)),
            None => (None, Some(av)),
        },
        None => (infra.and_then(|r| str_at(r, "/apiGroup")), None),
    };
    if infra_kind != Some("OpenStackCluster") || infra_group != Some(INFRA_GROUP) {
        return Ok(Resolved::NotApplicable(format!(
            "Cluster {ns}/{cluster_name}'s infrastructure is not an OpenStackCluster"
        )));
    }
    let osc_name = infra
        .and_then(|r| str_at(r, "/name"))
        .filter(|n| is_object_name(n))
        .ok_or_else(|| GuardError::InfraNotFound {
            namespace: ns.to_owned(),
            name: "<missing or invalid infrastructureRef.name>".to_owned(),
        })?;
    let mut versions: Vec<&str> = infra_version.into_iter().collect();
    versions.extend(OSC_VERSIONS.iter().filter(|v| Some(**v) != infra_version));
    let mut found = None;
    for version in versions {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            ns,
            &resource(
                INFRA_GROUP,
                version,
                "OpenStackCluster",
                "openstackclusters",
            ),
        );
        if let Some(osc) = get(&api, "OpenStackCluster", ns, osc_name, deadline).await? {
            found = Some(osc);
            break;
        }
    }
    let Some(osc) = found else {
        return Err(GuardError::InfraNotFound {
            namespace: ns.to_owned(),
            name: osc_name.to_owned(),
        });
    };
    if osc.metadata.deletion_timestamp.is_some() {
        return Ok(Resolved::NotApplicable(format!(
            "OpenStackCluster {ns}/{osc_name} is being deleted"
        )));
    }
    let data = &osc.data;
    let lb_id = str_at(data, "/status/apiServerManagedLoadBalancer/id")
        .or_else(|| str_at(data, "/status/apiServerLoadBalancer/id"));
    let enabled = lb_enabled(data.pointer("/spec/apiServerLoadBalancer"))
        || lb_enabled(data.pointer("/spec/apiServer/managedLoadBalancer"));
    let lb_id = match lb_id {
        Some(id) => id.to_owned(),
        None if !enabled => {
            return Ok(Resolved::NotApplicable(format!(
                "OpenStackCluster {ns}/{osc_name} has no API load balancer"
            )));
        }
        None => {
            return Err(GuardError::NoLoadBalancerId {
                namespace: ns.to_owned(),
                name: osc_name.to_owned(),
            });
        }
    };
    let no_ref = |what: &str| GuardError::NoIdentityRef {
        namespace: ns.to_owned(),
        name: osc_name.to_owned(),
        what: what.to_owned(),
    };
    let identity = data
        .pointer("/spec/identityRef")
        .ok_or_else(|| no_ref("missing"))?;
    let name = str_at(identity, "/name")
        .filter(|n| is_object_name(n))
        .ok_or_else(|| no_ref("no valid name"))?
        .to_owned();
    // CAPO's identity types (api/v1beta2/identity_types.go: Enum=Secret;ClusterIdentity,
    // default Secret).
    let identity_ref = match str_at(identity, "/type") {
        None | Some("Secret") => IdentityRef::Secret(name),
        Some("ClusterIdentity") => IdentityRef::ClusterIdentity(name),
        Some(kind) => {
            return Err(no_ref(&format!(
                "type {kind:?} is not supported, only Secret and ClusterIdentity"
            )));
        }
    };
    let cloud_name = str_at(identity, "/cloudName").ok_or_else(|| no_ref("no cloudName"))?;
    Ok(Resolved::Guard(Target {
        openstack_cluster: format!("{ns}/{osc_name}"),
        lb_id,
        namespace: ns.to_owned(),
        identity: identity_ref,
        cloud_name: cloud_name.to_owned(),
        region: str_at(identity, "/region").map(str::to_owned),
    }))
}

/// The Machine of a DELETE review that carried no `oldObject`, read from the API: its
/// Cluster name and identity, or None when it is not a control-plane Machine.
pub(crate) async fn read_machine(
    client: &Client,
    machine: &MachineDelete,
    deadline: Instant,
) -> Result<Option<(Option<String>, MachineIdentity)>, GuardError> {
    let ns = machine.namespace.as_str();
    let no_old = |what: String| GuardError::NoOldObject {
        namespace: ns.to_owned(),
        name: machine.name.clone(),
        what,
    };
    if !is_object_name(&machine.name) || !is_object_name(ns) {
        return Err(no_old("has no valid name".to_owned()));
    }
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &resource(CAPI_GROUP, &machine.version, "Machine", "machines"),
    );
    let object = get(&machines, "Machine", ns, &machine.name, deadline)
        .await
        .map_err(|e| no_old(format!("could not be read: {e}")))?
        .ok_or_else(|| {
            no_old(format!(
                "was not found (at {CAPI_GROUP}/{})",
                machine.version
            ))
        })?;
    let json =
        serde_json::to_value(&object).map_err(|_| no_old("could not be decoded".to_owned()))?;
    Ok(control_plane_cluster(&json).map(|cluster| (cluster, MachineIdentity::from_json(&json))))
}

/// The cluster's other control-plane Machines that are being deleted (deletionTimestamp set).
pub(crate) async fn deleting_machines(
    client: &Client,
    machine: &MachineDelete,
    cluster: &str,
    deadline: Instant,
) -> Result<Vec<MachineIdentity>, GuardError> {
    let ns = machine.namespace.as_str();
    let failed = |reason: String| GuardError::MachineList {
        namespace: ns.to_owned(),
        cluster: cluster.to_owned(),
        reason,
    };
    let machines: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &resource(CAPI_GROUP, &machine.version, "Machine", "machines"),
    );
    let params = ListParams::default()
        .labels(&format!(
            "{CLUSTER_NAME_LABEL}={cluster},{CONTROL_PLANE_LABEL}"
        ))
        .limit(MAX_CONTROL_PLANE_MACHINES);
    let list = match timeout_at(deadline, machines.list(&params)).await {
        Ok(Ok(list)) => list,
        Ok(Err(e)) => return Err(failed(kube_reason(&e))),
        Err(_) => return Err(failed("the request deadline passed".to_owned())),
    };
    if list
        .metadata
        .continue_
        .as_deref()
        .is_some_and(|c| !c.is_empty())
    {
        return Err(failed(format!(
            "more than {MAX_CONTROL_PLANE_MACHINES} control-plane Machines"
        )));
    }
    Ok(list
        .items
        .iter()
        .filter(|m| m.metadata.deletion_timestamp.is_some())
        .filter(|m| m.metadata.name.as_deref() != Some(machine.name.as_str()))
        .map(MachineIdentity::of)
        .collect())
}

/// Where the identity Secret of `target` is: its namespace and name.
async fn secret_location(
    client: &Client,
    target: &Target,
    deadline: Instant,
) -> Result<(String, String), GuardError> {
    let name = match &target.identity {
        IdentityRef::Secret(name) => return Ok((target.namespace.clone(), name.clone())),
        IdentityRef::ClusterIdentity(name) => name,
    };
    // CAPO reads the OpenStackClusterIdentity, refuses a namespace its namespaceSelector does
    // not select, and reads spec.secretRef {namespace, name} (pkg/scope/provider.go,
    // kubernetes-sigs/cluster-api-provider-openstack e52de58abe6f70f4ad3ad7f7f51632bfd70354b7).
    // The guard does the same: without the selector check, any namespace could make it read
    // another tenant's load balancer with a shared identity.
    let bad = |what: String| GuardError::ClusterIdentity {
        name: name.clone(),
        what,
    };
    let identities: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource(
            INFRA_GROUP,
            CLUSTER_IDENTITY_VERSION,
            "OpenStackClusterIdentity",
            "openstackclusteridentities",
        ),
    );
    let identity = get(&identities, "OpenStackClusterIdentity", "", name, deadline)
        .await?
        .ok_or_else(|| {
            bad(format!(
                "was not found (at {INFRA_GROUP}/{CLUSTER_IDENTITY_VERSION})"
            ))
        })?;
    let spec = identity.data.get("spec").unwrap_or(&Value::Null);
    let secret_ns = str_at(spec, "/secretRef/namespace")
        .filter(|n| is_object_name(n))
        .ok_or_else(|| bad("has no valid spec.secretRef.namespace".to_owned()))?;
    let secret_name = str_at(spec, "/secretRef/name")
        .filter(|n| is_object_name(n))
        .ok_or_else(|| bad("has no valid spec.secretRef.name".to_owned()))?;
    if let Some(selector) = spec.get("namespaceSelector").filter(|s| !s.is_null()) {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns = get(&namespaces, "Namespace", "", &target.namespace, deadline)
            .await?
            .ok_or_else(|| {
                bad(format!(
                    "cannot be checked: Namespace {} was not found",
                    target.namespace
                ))
            })?;
        let labels = ns.metadata.labels.unwrap_or_default();
        match selector_matches(selector, &labels) {
            Some(true) => {}
            Some(false) => {
                return Err(bad(format!(
                    "may not be used from namespace {} (its namespaceSelector does not select it)",
                    target.namespace
                )));
            }
            None => {
                return Err(bad(
                    "has a namespaceSelector stackgate cannot read".to_owned()
                ));
            }
        }
    }
    Ok((secret_ns.to_owned(), secret_name.to_owned()))
}

/// `metav1.LabelSelector` semantics (matchLabels and matchExpressions, all ANDed; an empty
/// selector selects everything). None for a selector that is malformed or too large.
fn selector_matches(
    selector: &Value,
    labels: &std::collections::BTreeMap<String, String>,
) -> Option<bool> {
    let selector = selector.as_object()?;
    let mut terms = 0usize;
    if let Some(match_labels) = selector.get("matchLabels").filter(|v| !v.is_null()) {
        for (key, value) in match_labels.as_object()? {
            terms += 1;
            if terms > MAX_SELECTOR_TERMS {
                return None;
            }
            if labels.get(key).map(String::as_str) != Some(value.as_str()?) {
                return Some(false);
            }
        }
    }
    if let Some(expressions) = selector.get("matchExpressions").filter(|v| !v.is_null()) {
        for expression in expressions.as_array()? {
            let key = expression.get("key")?.as_str()?;
            let values: Vec<&str> = match expression.get("values").filter(|v| !v.is_null()) {
                Some(v) => v
                    .as_array()?
                    .iter()
                    .map(Value::as_str)
                    .collect::<Option<_>>()?,
                None => Vec::new(),
            };
            terms += 1 + values.len();
            if terms > MAX_SELECTOR_TERMS {
                return None;
            }
            let value = labels.get(key).map(String::as_str);
            let matched = match expression.get("operator")?.as_str()? {
                "In" if !values.is_empty() => value.is_some_and(|v| values.contains(&v)),
                "NotIn" if !values.is_empty() => value.is_none_or(|v| !values.contains(&v)),
                "Exists" if values.is_empty() => value.is_some(),
                "DoesNotExist" if values.is_empty() => value.is_none(),
                _ => return None,
            };
            if !matched {
                return Some(false);
            }
        }
    }
    Some(true)
}

/// Reads the identity Secret of `target` and parses its clouds.yaml.
pub(crate) async fn identity(
    client: &Client,
    target: &Target,
    deadline: Instant,
) -> Result<Identity, GuardError> {
    let (ns, name) = secret_location(client, target, deadline).await?;
    let (ns, name) = (&ns, &name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret_err = |what| GuardError::Secret {
        namespace: ns.clone(),
        name: name.clone(),
        what,
    };
    let secret = get(&secrets, "Secret", ns, name, deadline)
        .await?
        .ok_or_else(|| secret_err("was not found"))?;
    let data = secret.data.as_ref();
    let clouds = data
        .and_then(|d| d.get("clouds.yaml"))
        .ok_or_else(|| secret_err("has no clouds.yaml key"))?;
    let auth = CloudAuth::from_clouds_yaml(&clouds.0, &target.cloud_name, target.region.as_deref())
        .map_err(|source| GuardError::Clouds {
            namespace: ns.clone(),
            name: name.clone(),
            source,
        })?;
    let cacert = data
        .and_then(|d| d.get("cacert"))
        .map(|b| b.0.clone())
        .filter(|b| !b.iter().all(u8::is_ascii_whitespace));
    let key = CredentialKey {
        secret: format!("{ns}/{name}"),
        uid: secret.metadata.uid.clone().unwrap_or_default(),
        resource_version: secret.metadata.resource_version.clone().unwrap_or_default(),
        cloud: target.cloud_name.clone(),
        region: auth.region.clone(),
    };
    Ok(Identity { auth, cacert, key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names() {
        assert!(is_object_name("cluster-a-cloud-config"));
        assert!(is_object_name("a.b"));
        assert!(!is_object_name(""));
        assert!(!is_object_name("../kube-system"));
        assert!(!is_object_name("a/b"));
        assert!(!is_object_name("-a"));
        assert!(!is_object_name("A"));
    }

    #[test]
    fn label_selectors() {
        let labels: std::collections::BTreeMap<String, String> =
            [("tenant".to_owned(), "a".to_owned())].into();
        let sel = |v: Value| selector_matches(&v, &labels);
        assert_eq!(sel(serde_json::json!({})), Some(true));
        assert_eq!(
            sel(serde_json::json!({"matchLabels": {"tenant": "a"}})),
            Some(true)
        );
        assert_eq!(
            sel(serde_json::json!({"matchLabels": {"tenant": "b"}})),
            Some(false)
        );
        let expr = |op: &str, values: Value| {
            sel(
                serde_json::json!({"matchExpressions": [{"key": "tenant", "operator": op, "values": values}]}),
            )
        };
        assert_eq!(expr("In", serde_json::json!(["a", "b"])), Some(true));
        assert_eq!(expr("NotIn", serde_json::json!(["a"])), Some(false));
        assert_eq!(expr("Exists", Value::Null), Some(true));
        assert_eq!(expr("DoesNotExist", Value::Null), Some(false));
        assert_eq!(expr("In", serde_json::json!([])), None, "In needs values");
        assert_eq!(expr("Gt", serde_json::json!(["1"])), None);
    }

    #[test]
    fn capo_is_enabled() {
        assert!(!lb_enabled(None));
        assert!(!lb_enabled(Some(&Value::Null)));
        assert!(lb_enabled(Some(&serde_json::json!({}))));
        assert!(lb_enabled(Some(&serde_json::json!({"enabled": true}))));
        assert!(!lb_enabled(Some(&serde_json::json!({"enabled": false}))));
    }
}
