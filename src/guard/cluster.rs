//! Kubernetes lookups: Machine → Cluster → OpenStackCluster (load-balancer id, identityRef)
//! → identity Secret (clouds.yaml, cacert).
//!
//! Every read is a single `GET` bounded by the request deadline. Everything stays in the
//! Machine's namespace: Cluster API requires the Cluster, its infrastructure object and the
//! identity Secret to live there, and names read from objects are checked to be Kubernetes
//! names before they go into a URL.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::time::{Instant, timeout_at};

use super::clouds::CloudAuth;
use super::error::{GuardError, kube_reason};
use super::probe::MachineDelete;
use crate::rules::lb_guard::CAPI_GROUP;

/// API group of CAPO's infrastructure objects.
pub const INFRA_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// OpenStackCluster versions tried when a reference names only the group (v1beta2 first:
/// it is the storage version since CAPO v0.15).
const OSC_VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];

/// Where the guard finds the load balancer and the credentials of a Machine's cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `namespace/name` of the OpenStackCluster, for messages.
    pub openstack_cluster: String,
    /// Octavia load-balancer id.
    pub lb_id: String,
    /// Namespace of the identity Secret.
    pub secret_namespace: String,
    /// Name of the identity Secret.
    pub secret_name: String,
    /// `identityRef.cloudName`.
    pub cloud_name: String,
    /// `identityRef.region`, when set.
    pub region: Option<String>,
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
    let Some(cluster) = get(&clusters, "Cluster", ns, cluster_name, deadline).await? else {
        return Ok(Resolved::NotApplicable(format!(
            "Cluster {ns}/{cluster_name} does not exist"
        )));
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
    if let Some(kind) = str_at(identity, "/type").filter(|t| *t != "Secret") {
        return Err(no_ref(&format!(
            "type {kind:?} is not supported, only Secret"
        )));
    }
    let secret_name = str_at(identity, "/name")
        .filter(|n| is_object_name(n))
        .ok_or_else(|| no_ref("no valid name"))?;
    let cloud_name = str_at(identity, "/cloudName").ok_or_else(|| no_ref("no cloudName"))?;
    Ok(Resolved::Guard(Target {
        openstack_cluster: format!("{ns}/{osc_name}"),
        lb_id,
        secret_namespace: ns.to_owned(),
        secret_name: secret_name.to_owned(),
        cloud_name: cloud_name.to_owned(),
        region: str_at(identity, "/region").map(str::to_owned),
    }))
}

/// Reads the identity Secret of `target` and parses its clouds.yaml.
pub(crate) async fn identity(
    client: &Client,
    target: &Target,
    deadline: Instant,
) -> Result<Identity, GuardError> {
    let (ns, name) = (&target.secret_namespace, &target.secret_name);
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
    fn capo_is_enabled() {
        assert!(!lb_enabled(None));
        assert!(!lb_enabled(Some(&Value::Null)));
        assert!(lb_enabled(Some(&serde_json::json!({}))));
        assert!(lb_enabled(Some(&serde_json::json!({"enabled": true}))));
        assert!(!lb_enabled(Some(&serde_json::json!({"enabled": false}))));
    }
}
