//! The cluster's cloud config as a fact: the few `[LoadBalancer]` settings that families
//! judging other objects read (`ovn-source-ranges` judges a Service by them), reduced from
//! the objects that carry a cloud config. Nothing secret is kept: the text is dropped once
//! reduced, and a fact names its object, never its content.
//!
//! Two reducers: [`ConfigObject::fact_of`] reads the one object `serve` watches
//! (`--cloud-config-object`, [`ConfigObject::watch`]); [`settings_of`] and [`Seen`] read every
//! cloud-config site of a face's input (`check`'s files, `audit`'s listed sites) in any order.

use kube::core::{DynamicObject, GroupVersionKind};

use super::{Resource, Watch};
use crate::cloudconf::{Document, parse_bool, schema};
use crate::secret_text::SecretText;
use crate::sites::{self, SiteKind, SitesDocument};

/// Secrets, one of the two kinds a watched cloud config can be.
pub const SECRETS: Resource = Resource {
    group: "",
    version: "v1",
    kind: "Secret",
    plural: "secrets",
};

/// ConfigMaps, the other.
pub const CONFIGMAPS: Resource = Resource {
    group: "",
    version: "v1",
    kind: "ConfigMap",
    plural: "configmaps",
};

/// The data key read when `--cloud-config-key` is not given (the upstream chart's and
/// manifests' `cloud.conf`).
pub const DEFAULT_KEY: &str = "cloud.conf";

/// The cluster's cloud config, as the families that judge other objects by it need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloudConfigFact {
    /// The configured cloud config was read.
    Known(LbSettings),
    /// It could not be read: why, naming the object, never its content.
    Unavailable(String),
}

/// The settings of a cloud config these families read (nothing secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbSettings {
    /// Where it was read, e.g. `Secret kube-system/cloud-config key cloud.conf`.
    pub source: String,
    /// Whether the text is valid gcfg (else the CCM does not start; `cloud-config-integrity`
    /// reports it where the config is written).
    pub readable: bool,
    /// `[LoadBalancer] lb-provider = ovn` (case-insensitive, as the CCM compares it).
    pub ovn: bool,
    /// `[LoadBalancer] manage-security-groups` is true (absent or not a boolean: false).
    pub manage_security_groups: bool,
}

impl LbSettings {
    /// Reads the settings from the INI text of a cloud config found at `source`.
    pub fn from_ini(source: String, text: &str) -> Self {
        let Ok(doc) = Document::parse(text) else {
            return LbSettings {
                source,
                readable: false,
                ovn: false,
                manage_security_groups: false,
            };
        };
        Self::from_document(source, &doc)
    }

    /// Reads the settings from a parsed cloud config.
    pub fn from_document(source: String, doc: &Document) -> Self {
        let value = |key: &str| {
            doc.effective("LoadBalancer", None, key)
                .and_then(|e| e.value.as_deref().map(|v| v.trim().to_owned()))
        };
        LbSettings {
            source,
            readable: true,
            ovn: value("lb-provider").is_some_and(|v| v.eq_ignore_ascii_case("ovn")),
            // A key without `=` is true in gcfg; an absent key is false.
            manage_security_groups: doc
                .effective("LoadBalancer", None, "manage-security-groups")
                .is_some_and(|e| parse_bool(e.value.as_deref()) == Some(true)),
        }
    }

    /// The same settings, read from another place: equal when the decisions agree.
    pub fn agrees_with(&self, other: &LbSettings) -> bool {
        (self.readable, self.ovn, self.manage_security_groups)
            == (other.readable, other.ovn, other.manage_security_groups)
    }
}

/// The object that holds the cluster's cloud config (`serve --cloud-config-object`).
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

    /// What to watch: this one object.
    pub fn watch(&self) -> Watch {
        Watch {
            resource: match self.kind {
                SiteKind::Secret => SECRETS,
                SiteKind::ConfigMap => CONFIGMAPS,
            },
            namespace: Some(self.namespace.clone()),
            name: self.name.clone(),
        }
    }

    /// The fact before the first read.
    pub fn not_read_yet(&self) -> CloudConfigFact {
        CloudConfigFact::Unavailable(format!("{} has not been read yet", self.describe()))
    }

    /// The fact when a complete list does not hold the object, or it was deleted.
    pub fn absent(&self) -> CloudConfigFact {
        CloudConfigFact::Unavailable(format!("{} does not exist", self.describe()))
    }

    /// The fact when the API server refuses to show the object (HTTP `code`).
    pub fn refused(&self, code: u16) -> CloudConfigFact {
        CloudConfigFact::Unavailable(format!(
            "{} cannot be read by stackgate (HTTP {code}: RBAC)",
            self.describe()
        ))
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
        // Held as `SecretText` from here on: the INI carries credentials, and the fact keeps
        // only the load-balancer settings it reads out of it.
        let text = match self.kind {
            SiteKind::ConfigMap => SecretText::new(value.to_owned()),
            SiteKind::Secret => {
                let Ok(bytes) = sites::decode_base64_like_go(value) else {
                    return unavailable("is not valid base64");
                };
                let Ok(text) = String::from_utf8(bytes) else {
                    return unavailable("is not UTF-8 text");
                };
                SecretText::new(text)
            }
        };
        CloudConfigFact::Known(LbSettings::from_ini(source, text.expose()))
    }
}

/// The load-balancer settings of every OpenStack cloud config one object carries (its
/// sites under the `CloudConfigSites` policy `sites`), each named by its site and, when
/// given, the place the object was read from (`in a.yaml`).
pub fn settings_of(
    kind: &GroupVersionKind,
    object: &DynamicObject,
    place: Option<&str>,
    sites: &SitesDocument,
) -> Vec<LbSettings> {
    let mut out = Vec::new();
    for site in sites::find(kind, object, sites) {
        let Ok(ini) = &site.text else {
            continue;
        };
        let ini = ini.expose();
        let source = match place {
            Some(place) => format!("{} in {place}", site.describe(None)),
            None => site.describe(None),
        };
        match Document::parse(ini) {
            Ok(doc) => {
                if site.other_platforms && !schema::is_openstack_config(&doc) {
                    continue;
                }
                out.push(LbSettings::from_document(source, &doc));
            }
            Err(_) => out.push(LbSettings::from_ini(source, ini)),
        }
    }
    out
}

/// The cloud configs of a face's input as the fact needs them, in constant space: the first,
/// the first that disagrees with it, and how many there are.
#[derive(Debug, Default)]
pub struct Seen {
    first: Option<LbSettings>,
    other: Option<LbSettings>,
    count: usize,
}

impl Seen {
    /// Adds one config's settings.
    pub fn add(&mut self, settings: LbSettings) {
        self.count += 1;
        match &self.first {
            None => self.first = Some(settings),
            Some(first) if self.other.is_none() && !settings.agrees_with(first) => {
                self.other = Some(settings);
            }
            Some(_) => {}
        }
    }

    /// One fact from the configs seen: none when there is none (the family then says it sees
    /// no config); the settings when they all agree; unavailable when they disagree, since
    /// then the face cannot tell which one applies. `holder` names where they were found
    /// ("this input holds"), `undecidable` says why the face cannot choose.
    pub fn fact(self, holder: &str, undecidable: &str) -> Option<CloudConfigFact> {
        let Seen {
            first,
            other,
            count,
        } = self;
        match (first?, other) {
            (first, None) => Some(CloudConfigFact::Known(first)),
            (first, Some(other)) => Some(CloudConfigFact::Unavailable(format!(
                "{holder} {count} cloud configs whose load-balancer settings differ, e.g. {} \
                 and {}, and {undecidable}",
                first.source, other.source
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    #[test]
    fn settings_from_ini() {
        let s = LbSettings::from_ini(
            "x".into(),
            "[LoadBalancer]\nlb-provider = OVN\nmanage-security-groups = yes\n",
        );
        assert!(s.readable && s.ovn && s.manage_security_groups);
        let s = LbSettings::from_ini(
            "x".into(),
            "[LoadBalancer]\nlb-provider = ovn\nmanage-security-groups = maybe\n",
        );
        assert!(s.ovn && !s.manage_security_groups);
        let s = LbSettings::from_ini("x".into(), "[LoadBalancer]\nlb-provider = amphora\n");
        assert!(!s.ovn);
        assert!(!LbSettings::from_ini("x".into(), "[LoadBalancer\n").readable);
    }

    #[test]
    fn parse_object_flag() {
        let o = ConfigObject::parse("Secret/kube-system/cloud-config", "cloud.conf").unwrap();
        assert_eq!(
            o.describe(),
            "Secret kube-system/cloud-config key cloud.conf"
        );
        assert_eq!(o.watch().resource, SECRETS);
        assert_eq!(o.watch().field_selector(), "metadata.name=cloud-config");
        let c = ConfigObject::parse("ConfigMap/ns/cc", "k").unwrap();
        assert_eq!(c.watch().resource, CONFIGMAPS);
        assert_eq!(c.watch().namespace.as_deref(), Some("ns"));
        assert!(ConfigObject::parse("Pod/a/b", "k").is_err());
        assert!(ConfigObject::parse("Secret/a", "k").is_err());
        assert!(ConfigObject::parse("Secret/a/b/c", "k").is_err());
        assert!(ConfigObject::parse("Secret//b", "k").is_err());
        assert!(ConfigObject::parse("Secret/a/", "k").is_err());
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

    /// A site shared with other platforms gives settings only when it holds an OpenStack
    /// config; another platform's gcfg there is not the cluster's OpenStack cloud config.
    #[test]
    fn shared_sites_give_settings_only_for_openstack_configs() {
        // The default sites document's shared site (policies/cloud-config-sites.yaml).
        let sites: crate::sites::SitesDocument = serde_json::from_value(json!({
            "apiVersion": "stackgate.dev/v1alpha1", "kind": "CloudConfigSites",
            "sites": [{"kind": "ConfigMap", "namespace": "openshift-config",
                       "name": "cloud-provider-config", "key": "config", "otherPlatforms": true}]}))
        .expect("a sites document");
        let gvk = GroupVersionKind::gvk("", "v1", "ConfigMap");
        let settings_of_text = |text: &str| {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cloud-provider-config", "namespace": "openshift-config"},
                "data": {"config": text}}))
            .unwrap();
            settings_of(&gvk, &object, Some("a.yaml"), &sites)
        };
        let openstack = settings_of_text(
            "[Global]\nauth-url = https://keystone\n[LoadBalancer]\nlb-provider = ovn\n",
        );
        assert_eq!(openstack.len(), 1, "{openstack:?}");
        assert!(openstack[0].ovn);
        assert!(openstack[0].source.ends_with(" in a.yaml"), "{openstack:?}");
        let vsphere = settings_of_text("[Global]\nsecret-name = vsphere-creds\n");
        assert!(vsphere.is_empty(), "{vsphere:?}");
    }

    fn settings(source: &str, ovn: bool) -> LbSettings {
        LbSettings {
            source: source.to_owned(),
            readable: true,
            ovn,
            manage_security_groups: false,
        }
    }

    /// The fact does not depend on the order the configs are seen in: agreeing ones give the
    /// first, disagreeing ones are unavailable and count every config, whichever came first.
    #[test]
    fn seen_is_none_known_or_unavailable_in_any_order() {
        assert_eq!(Seen::default().fact("h", "u"), None);
        let mut agree = Seen::default();
        agree.add(settings("a", true));
        agree.add(settings("b", true));
        assert_eq!(
            agree.fact("h", "u"),
            Some(CloudConfigFact::Known(settings("a", true)))
        );
        for order in [[true, false, true], [false, true, true]] {
            let mut seen = Seen::default();
            for (i, ovn) in order.into_iter().enumerate() {
                seen.add(settings(&format!("s{i}"), ovn));
            }
            match seen.fact("this input holds", "the face cannot choose") {
                Some(CloudConfigFact::Unavailable(why)) => assert!(
                    why.starts_with("this input holds 3 cloud configs whose load-balancer settings differ, e.g. s0 and s1")
                        && why.ends_with("and the face cannot choose"),
                    "{why}"
                ),
                other => panic!("{other:?}"),
            }
        }
    }
}
