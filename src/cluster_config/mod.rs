//! The cluster's cloud config as a fact, for families that judge other objects by it
//! (`ovn-source-ranges` judges a Service by the cluster's `[LoadBalancer]` settings).
//!
//! One configured Secret or ConfigMap (`serve --cloud-config-object Secret/kube-system/cloud-config
//! --cloud-config-key cloud.conf`) is watched by name ([`watcher`]: list and watch with a
//! `metadata.name` field selector, so RBAC can grant `get`/`list`/`watch` on that one object
//! with `resourceNames`). Each version is reduced at once to the few settings the families read
//! ([`LbSettings`]); the text is dropped, never logged. The current fact is kept in a
//! [`ConfigFactCell`]; [`CloudConfigSource`] is the [`FactSource`] that hands it to the engine
//! for Service reviews, with no IO on the request path.

pub mod watcher;

use std::sync::Arc;

use arc_swap::ArcSwap;
use base64::Engine as _;
use kube::core::DynamicObject;

use crate::admission::{FactSource, Gather, KnownFacts, Webhook, body_mentions};
use crate::engine::{Engine, Facts};
use crate::rules::ovn_source_ranges::{CloudConfigFact, FAMILY, LbSettings};
use crate::sites::SiteKind;

/// The data key read when `--cloud-config-key` is not given (the upstream chart's and
/// manifests' `cloud.conf`).
pub const DEFAULT_KEY: &str = "cloud.conf";

/// The object that holds the cluster's cloud config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigObject {
    /// Secret or ConfigMap.
    pub kind: SiteKind,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The data key holding the INI text.
    pub key: String,
}

/// Why a `--cloud-config-object` value is not `Kind/namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not Secret/<namespace>/<name> or ConfigMap/<namespace>/<name>")]
pub struct ConfigObjectError(pub String);

impl ConfigObject {
    /// Parses `Secret/<namespace>/<name>` or `ConfigMap/<namespace>/<name>`, with `key`.
    pub fn parse(text: &str, key: &str) -> Result<Self, ConfigObjectError> {
        let fail = || ConfigObjectError(text.to_owned());
        let mut parts = text.split('/');
        let kind = match parts.next() {
            Some("Secret") => SiteKind::Secret,
            Some("ConfigMap") => SiteKind::ConfigMap,
            _ => return Err(fail()),
        };
        let (Some(namespace), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(fail());
        };
        if namespace.is_empty() || name.is_empty() || key.is_empty() {
            return Err(fail());
        }
        Ok(ConfigObject {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        })
    }

    /// `Secret kube-system/cloud-config key cloud.conf`, for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} {}/{} key {}",
            self.kind.as_str(),
            self.namespace,
            self.name,
            self.key
        )
    }

    /// The fact one stored version of the object gives: the settings of the INI under the
    /// key, or why there are none. Never carries the text.
    pub fn fact_of(&self, object: &DynamicObject) -> CloudConfigFact {
        let source = self.describe();
        let unavailable = |why: &str| CloudConfigFact::Unavailable(format!("{source} {why}"));
        let data = object.data.get("data").and_then(|d| d.get(&self.key));
        let Some(value) = data.and_then(serde_json::Value::as_str) else {
            return unavailable("is not set");
        };
        let text = match self.kind {
            SiteKind::ConfigMap => value.to_owned(),
            SiteKind::Secret => {
                let compact: String = value.split_ascii_whitespace().collect();
                let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(compact) else {
                    return unavailable("is not valid base64");
                };
                let Ok(text) = String::from_utf8(bytes) else {
                    return unavailable("is not UTF-8 text");
                };
                text
            }
        };
        CloudConfigFact::Known(LbSettings::from_ini(source, &text))
    }
}

/// The current cloud-config fact, shared by the watcher (writer) and the fact source
/// (readers). Starts as unavailable ("not read yet").
#[derive(Debug, Clone)]
pub struct ConfigFactCell(Arc<ArcSwap<CloudConfigFact>>);

impl ConfigFactCell {
    /// A cell for `object`, not read yet.
    pub fn new(object: &ConfigObject) -> Self {
        ConfigFactCell(Arc::new(ArcSwap::from_pointee(
            CloudConfigFact::Unavailable(format!("{} has not been read yet", object.describe())),
        )))
    }

    /// The current fact.
    pub fn get(&self) -> Arc<CloudConfigFact> {
        self.0.load_full()
    }

    /// Replaces the fact.
    pub fn set(&self, fact: CloudConfigFact) {
        self.0.store(Arc::new(fact));
    }
}

/// The cloud-config fact as a [`FactSource`]: wants Service reviews that may be of type
/// LoadBalancer while a policy of the family exists, and answers from the cell at once.
#[derive(Debug, Clone)]
pub struct CloudConfigSource {
    cell: ConfigFactCell,
}

impl CloudConfigSource {
    /// The source over `cell` (filled by [`watcher::run`]).
    pub fn new(cell: ConfigFactCell) -> Self {
        CloudConfigSource { cell }
    }
}

impl FactSource for CloudConfigSource {
    fn wants(&self, _webhook: Webhook, body: &[u8], engine: &Engine) -> Option<Arc<dyn Gather>> {
        // Cheap: a Service review of type LoadBalancer names both words.
        if !body_mentions(body, b"\"Service\"") || !body_mentions(body, b"LoadBalancer") {
            return None;
        }
        engine.policies().for_rule(FAMILY.id).next()?;
        let fact = (*self.cell.get()).clone();
        Some(Arc::new(KnownFacts(Facts::of(FAMILY.id, fact))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parse_object_flag() {
        let o = ConfigObject::parse("Secret/kube-system/cloud-config", "cloud.conf").unwrap();
        assert_eq!(
            o.describe(),
            "Secret kube-system/cloud-config key cloud.conf"
        );
        assert!(ConfigObject::parse("Pod/a/b", "k").is_err());
        assert!(ConfigObject::parse("Secret/a", "k").is_err());
        assert!(ConfigObject::parse("Secret/a/b/c", "k").is_err());
        assert!(ConfigObject::parse("ConfigMap/a/b", "").is_err());
    }

    #[test]
    fn facts_from_stored_objects_never_carry_the_text() {
        let o = ConfigObject::parse("Secret/kube-system/cloud-config", "cloud.conf").unwrap();
        let ini = "[Global]\npassword = hunter2\n[LoadBalancer]\nlb-provider = ovn\n";
        let secret: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloud-config", "namespace": "kube-system"},
            "data": {"cloud.conf": base64::engine::general_purpose::STANDARD.encode(ini)}}))
            .unwrap();
        match o.fact_of(&secret) {
            CloudConfigFact::Known(s) => assert!(s.ovn && !s.manage_security_groups),
            other => panic!("{other:?}"),
        }
        let bad: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloud-config"}, "data": {"cloud.conf": "hunter2!!"}}))
            .unwrap();
        let fact = format!("{:?}", o.fact_of(&bad));
        assert!(
            fact.contains("not valid base64") && !fact.contains("hunter2"),
            "{fact}"
        );
        let missing: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloud-config"}, "data": {}}))
            .unwrap();
        assert!(format!("{:?}", o.fact_of(&missing)).contains("is not set"));
    }
}
