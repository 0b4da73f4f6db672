//! Errors of the guard's IO, one enum per boundary: the Kubernetes API and the identity
//! Secret ([`GuardError`]), clouds.yaml ([`CloudsError`]) and OpenStack ([`OpenStackError`]).
//!
//! Every `Display` is safe to show in an admission warning or denial: it names objects,
//! URLs, HTTP statuses and error categories, never a credential, a token or a body.

use std::fmt;
use std::time::Duration;

use crate::telemetry::error_chain;

/// Which OpenStack service a call went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Service {
    /// Keystone v3.
    Identity,
    /// Octavia v2.
    LoadBalancer,
}

impl Service {
    /// Metric label: `identity` or `load-balancer` (the catalog service types).
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Identity => "identity",
            Service::LoadBalancer => "load-balancer",
        }
    }
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Service::Identity => "Keystone",
            Service::LoadBalancer => "Octavia",
        })
    }
}

/// A call to Keystone or Octavia failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenStackError {
    /// No answer before the call's deadline (`--openstack-timeout` or the request deadline).
    #[error("{service} did not answer within {} ms", .after.as_millis())]
    Timeout {
        /// Service called.
        service: Service,
        /// How long the call was given.
        after: Duration,
    },
    /// Connection, TLS or protocol failure.
    #[error("{service} at {url} could not be reached: {reason}")]
    Transport {
        /// Service called.
        service: Service,
        /// URL called (no credentials are ever part of it).
        url: String,
        /// The transport error chain.
        reason: String,
    },
    /// An HTTP status other than the documented success.
    #[error("{service} at {url} answered HTTP {status}{hint}")]
    Status {
        /// Service called.
        service: Service,
        /// URL called.
        url: String,
        /// HTTP status code.
        status: u16,
        /// What the status usually means, e.g. " (check the credentials)".
        hint: &'static str,
    },
    /// The body was not what the API reference documents.
    #[error("{service} at {url} answered with an unexpected body ({reason})")]
    Decode {
        /// Service called.
        service: Service,
        /// URL called.
        url: String,
        /// Category and position only (bodies are never quoted).
        reason: String,
    },
    /// Keystone accepted the credentials but sent no `X-Subject-Token`.
    #[error("Keystone at {url} answered without an X-Subject-Token header")]
    NoToken {
        /// URL called.
        url: String,
    },
    /// The service catalog has no usable Octavia endpoint.
    #[error("the Keystone catalog has no {interface} load-balancer endpoint{}", region_note(.region))]
    NoEndpoint {
        /// Interface looked for (`public`, `internal`, `admin`).
        interface: String,
        /// Region looked for, when one is configured.
        region: Option<String>,
    },
    /// A URL from clouds.yaml or the catalog is not a valid http(s) URL.
    #[error("{what} {url:?} is not a valid http(s) URL")]
    Url {
        /// Which URL (`auth_url`, `the load-balancer endpoint`).
        what: &'static str,
        /// The URL, printed masked.
        url: super::masked_url::CredentialUrl,
    },
    /// The Secret's `cacert` holds no usable PEM certificate.
    #[error("the identity Secret's cacert holds no usable PEM certificate")]
    CaCert,
    /// The load balancer id is not an id Octavia issues (it is interpolated into a path).
    #[error("load balancer id {0:?} is not an Octavia id")]
    BadId(String),
}

fn region_note(region: &Option<String>) -> String {
    region
        .as_deref()
        .map(|r| format!(" in region {r}"))
        .unwrap_or_default()
}

impl OpenStackError {
    /// Closed-set metric label.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            OpenStackError::Timeout { .. } => "timeout",
            OpenStackError::Transport { .. } => "transport",
            OpenStackError::Status { status: 401, .. } => "unauthorized",
            OpenStackError::Status { status: 403, .. } => "forbidden",
            OpenStackError::Status { status: 404, .. } => "not_found",
            OpenStackError::Status { status, .. } if *status >= 500 => "server_error",
            OpenStackError::Status { .. } => "client_error",
            OpenStackError::Decode { .. } | OpenStackError::NoToken { .. } => "decode",
            OpenStackError::NoEndpoint { .. } => "no_endpoint",
            OpenStackError::Url { .. } | OpenStackError::CaCert | OpenStackError::BadId(_) => {
                "config"
            }
        }
    }
}

/// clouds.yaml could not be turned into Keystone credentials.
#[derive(Debug, thiserror::Error)]
pub enum CloudsError {
    /// Not UTF-8.
    #[error("clouds.yaml is not UTF-8")]
    NotUtf8,
    /// Not YAML (the parser message is not repeated: it can quote the document).
    #[error("clouds.yaml is not valid YAML{}", at(*.location))]
    NotYaml {
        /// Line and column, when the parser knows them.
        location: Option<(u64, u64)>,
    },
    /// `clouds.<name>` is missing.
    #[error("clouds.yaml has no cloud named {0:?} (identityRef.cloudName)")]
    NoCloud(String),
    /// `auth.auth_url` is missing.
    #[error("cloud {0:?} in clouds.yaml has no auth.auth_url")]
    NoAuthUrl(String),
    /// An `auth_type` stackgate does not implement.
    #[error(
        "cloud {cloud:?} uses auth_type {auth_type:?}; stackgate supports password and \
         v3applicationcredential"
    )]
    Unsupported {
        /// Cloud name.
        cloud: String,
        /// The auth_type.
        auth_type: String,
    },
    /// Required fields are missing.
    #[error("cloud {cloud:?} in clouds.yaml is incomplete: {what}")]
    Incomplete {
        /// Cloud name.
        cloud: String,
        /// What is missing (field names only).
        what: &'static str,
    },
    /// `verify: false` is not honoured.
    #[error(
        "cloud {0:?} sets verify: false; stackgate always verifies TLS (put the CA in the \
         identity Secret's cacert key)"
    )]
    InsecureNotSupported(String),
}

/// `namespace/name`, or `name` for a cluster-scoped object (empty namespace).
fn qualified(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

fn at(location: Option<(u64, u64)>) -> String {
    location
        .map(|(l, c)| format!(" (line {l}, column {c})"))
        .unwrap_or_default()
}

/// Gathering the facts failed: the Kubernetes objects, the identity Secret, or OpenStack.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// The Machine names no Cluster.
    #[error("the Machine has neither the cluster.x-k8s.io/cluster-name label nor spec.clusterName")]
    NoClusterName,
    /// A Kubernetes API read failed.
    #[error(
        "reading {what} {} from the Kubernetes API failed: {reason}",
        qualified(.namespace, .name)
    )]
    Kube {
        /// Kind read.
        what: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// Status code and reason, or the error category (never a body).
        reason: String,
    },
    /// A Kubernetes API read did not finish in time.
    #[error(
        "reading {what} {} from the Kubernetes API took longer than the request deadline",
        qualified(.namespace, .name)
    )]
    KubeTimeout {
        /// Kind read.
        what: &'static str,
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// A read answered 404: the object does not exist, or its API version is not served.
    #[error("{what} {namespace}/{name} was not found (at {api_version})")]
    NotFound {
        /// Kind read.
        what: &'static str,
        /// API version asked for.
        api_version: String,
        /// Namespace (empty for cluster-scoped objects).
        namespace: String,
        /// Name.
        name: String,
    },
    /// The review carried no `oldObject` and the Machine it names could not be read.
    #[error("the DELETE review carries no oldObject and Machine {namespace}/{name} {what}")]
    NoOldObject {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What went wrong.
        what: String,
    },
    /// The cluster's control-plane Machines could not be listed.
    #[error("listing the control-plane Machines of Cluster {namespace}/{cluster} failed: {reason}")]
    MachineList {
        /// Namespace.
        namespace: String,
        /// Cluster name.
        cluster: String,
        /// Why.
        reason: String,
    },
    /// The OpenStackClusterIdentity cannot be used from the Machine's namespace.
    #[error("OpenStackClusterIdentity {name} {what}")]
    ClusterIdentity {
        /// Identity name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// The Cluster's infrastructure object does not exist.
    #[error("OpenStackCluster {namespace}/{name} was not found")]
    InfraNotFound {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The OpenStackCluster has an API load balancer but no id in its status yet.
    #[error(
        "OpenStackCluster {namespace}/{name} has no load balancer id in \
         status.apiServerLoadBalancer.id (v1beta1) or status.apiServerManagedLoadBalancer.id \
         (v1beta2)"
    )]
    NoLoadBalancerId {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The OpenStackCluster has no usable `spec.identityRef`.
    #[error("OpenStackCluster {namespace}/{name} has no usable spec.identityRef ({what})")]
    NoIdentityRef {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// The identity Secret does not exist or lacks `clouds.yaml`.
    #[error("identity Secret {namespace}/{name} {what}")]
    Secret {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// `was not found` or `has no clouds.yaml key`.
        what: &'static str,
    },
    /// clouds.yaml is unusable.
    #[error("identity Secret {namespace}/{name}: {source}")]
    Clouds {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// What is wrong.
        #[source]
        source: CloudsError,
    },
    /// Keystone or Octavia failed.
    #[error(transparent)]
    OpenStack(#[from] OpenStackError),
    /// The checks as a whole did not finish before the request deadline.
    #[error("the checks did not finish before the request deadline")]
    Deadline,
    /// The fact-gathering task ended abnormally (a bug; logged).
    #[error("internal error while checking the load balancer")]
    Internal,
}

impl GuardError {
    /// Closed-set metric label for `stackgate_lb_guard_unavailable_total`.
    pub fn metric_reason(&self) -> &'static str {
        match self {
            GuardError::NoClusterName => "no_cluster_name",
            GuardError::Kube { .. } => "kube_error",
            GuardError::KubeTimeout { .. } => "kube_timeout",
            GuardError::InfraNotFound { .. } => "openstackcluster_not_found",
            GuardError::NotFound { .. } => "not_found",
            GuardError::NoOldObject { .. } => "no_old_object",
            GuardError::MachineList { .. } => "machine_list",
            GuardError::ClusterIdentity { .. } => "cluster_identity",
            GuardError::NoLoadBalancerId { .. } => "no_load_balancer_id",
            GuardError::NoIdentityRef { .. } => "no_identity_ref",
            GuardError::Secret { .. } => "no_credentials",
            GuardError::Clouds { .. } => "bad_clouds_yaml",
            GuardError::OpenStack(e) => match e {
                OpenStackError::Timeout {
                    service: Service::Identity,
                    ..
                } => "keystone_timeout",
                OpenStackError::Timeout { .. } => "octavia_timeout",
                OpenStackError::Status {
                    service: Service::Identity,
                    status: 401,
                    ..
                } => "keystone_unauthorized",
                OpenStackError::NoEndpoint { .. } => "no_octavia_endpoint",
                OpenStackError::Status {
                    service: Service::LoadBalancer,
                    status: 404,
                    ..
                } => "load_balancer_not_found",
                OpenStackError::Url { .. } | OpenStackError::CaCert | OpenStackError::BadId(_) => {
                    "bad_config"
                }
                e if matches!(service_of(e), Some(Service::Identity)) => "keystone_error",
                _ => "octavia_error",
            },
            GuardError::Deadline => "deadline",
            GuardError::Internal => "internal",
        }
    }
}

fn service_of(e: &OpenStackError) -> Option<Service> {
    match e {
        OpenStackError::Timeout { service, .. }
        | OpenStackError::Transport { service, .. }
        | OpenStackError::Status { service, .. }
        | OpenStackError::Decode { service, .. } => Some(*service),
        OpenStackError::NoToken { .. } => Some(Service::Identity),
        _ => None,
    }
}

/// A kube client error reduced to what is safe to show: the API status (code, reason,
/// message: written by the apiserver, never object data) or the error category.
pub(crate) fn kube_reason(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            let mut out = format!("HTTP {}", status.code);
            if !status.reason.is_empty() {
                out.push(' ');
                out.push_str(&status.reason);
            }
            if !status.message.is_empty() {
                out.push_str(": ");
                out.push_str(&status.message);
            }
            out
        }
        // serde messages can quote a value of the object (a Secret's data): category only.
        kube::Error::SerdeError(_) => "the response could not be decoded".to_owned(),
        kube::Error::HyperError(e) => format!("transport: {}", error_chain(e)),
        kube::Error::Service(e) => format!("transport: {}", error_chain(e.as_ref())),
        _ => "the request failed".to_owned(),
    }
}
