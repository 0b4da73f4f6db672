//! The cluster's platform as a fact: on OpenShift, `openshift-config/cloud-provider-config` is
//! a cloud-config site of every platform, and an OpenStack one only when the cluster runs on
//! OpenStack. The site policy needs it when it has `otherPlatforms` sites.
//!
//! The cluster-scoped `Infrastructure` object `cluster` (`config.openshift.io/v1`) reports the
//! platform in `status.platformStatus.type`, falling back to the deprecated `status.platform`
//! (openshift/api `config/v1/types_infrastructure.go`). [`PlatformFact::of_infrastructure`]
//! reduces one version of it to the platform type; nothing else is kept.

use kube::core::DynamicObject;

use super::{Resource, Watch};

/// `infrastructures.config.openshift.io/v1`.
pub const INFRASTRUCTURES: Resource = Resource {
    group: "config.openshift.io",
    version: "v1",
    kind: "Infrastructure",
    plural: "infrastructures",
};

/// The name of the one `Infrastructure` object OpenShift keeps.
pub const INFRASTRUCTURE_NAME: &str = "cluster";

/// The fact's watched object, `Infrastructure/cluster` (there is no other), as a
/// [`super::WatchedFact`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Infrastructure;

/// What to watch: the one cluster-scoped `Infrastructure` object `cluster`.
pub fn watch() -> Watch {
    Watch {
        resource: INFRASTRUCTURES,
        namespace: None,
        name: INFRASTRUCTURE_NAME.to_owned(),
    }
}

/// The infrastructure platform the cluster runs on, as the OpenShift `Infrastructure`
/// object `cluster` reports it (`status.platformStatus.type`, e.g. `OpenStack`, `VSphere`,
/// `GCP`, `None`). Only a known platform is a fact; unknown is the absence of one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Platform {
    /// `OpenStack`.
    OpenStack,
    /// Any other platform type, as reported (`VSphere`, `GCP`, `AWS`, `None`, ...).
    Other(String),
}

impl Platform {
    /// The platform of a reported type (`OpenStack` is matched exactly, as OpenShift's
    /// `PlatformType` constants are spelled).
    pub fn from_type(platform_type: &str) -> Self {
        if platform_type == "OpenStack" {
            Platform::OpenStack
        } else {
            Platform::Other(platform_type.to_owned())
        }
    }
}

/// What stackgate knows about the cluster's platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlatformFact {
    /// The `Infrastructure` object reports this platform.
    Known(Platform),
    /// Unknown, and why (not read yet, not OpenShift, forbidden, no type reported).
    Unknown(String),
}

impl PlatformFact {
    /// The fact one stored version of the `Infrastructure` object gives.
    pub fn of_infrastructure(object: &DynamicObject) -> Self {
        let status = object.data.get("status");
        let reported = status
            .and_then(|s| s.get("platformStatus"))
            .and_then(|p| p.get("type"))
            .and_then(serde_json::Value::as_str)
            .filter(|t| !t.is_empty())
            .or_else(|| {
                status
                    .and_then(|s| s.get("platform"))
                    .and_then(serde_json::Value::as_str)
                    .filter(|t| !t.is_empty())
            });
        match reported {
            Some(platform_type) => PlatformFact::Known(Platform::from_type(platform_type)),
            None => PlatformFact::Unknown(
                "Infrastructure cluster reports no platform type yet".to_owned(),
            ),
        }
    }

    /// The known platform, if any.
    pub fn platform(&self) -> Option<&Platform> {
        match self {
            PlatformFact::Known(p) => Some(p),
            PlatformFact::Unknown(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn infrastructure(status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "config.openshift.io/v1",
            "kind": "Infrastructure", "metadata": {"name": "cluster"}, "status": status}))
        .unwrap()
    }

    #[test]
    fn platform_status_type_first_then_the_deprecated_field() {
        let both = infrastructure(json!({"platform": "OpenStack",
            "platformStatus": {"type": "VSphere"}}));
        assert_eq!(
            PlatformFact::of_infrastructure(&both),
            PlatformFact::Known(Platform::Other("VSphere".into()))
        );
        let old = infrastructure(json!({"platform": "OpenStack"}));
        assert_eq!(
            PlatformFact::of_infrastructure(&old),
            PlatformFact::Known(Platform::OpenStack)
        );
        let none = infrastructure(json!({"platformStatus": {"type": ""}}));
        assert!(PlatformFact::of_infrastructure(&none).platform().is_none());
        assert_eq!(watch().field_selector(), "metadata.name=cluster");
        assert_eq!(watch().namespace, None);
    }
}
