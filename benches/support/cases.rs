//! The review cases shared by `benches/engine.rs` (in process) and `benches/loadbench.rs`
//! (over HTTPS): one table row per case, built from the captured AdmissionReviews in
//! `tests/fixtures/captured/`.
//!
//! A case whose fixture is not there is skipped with a note. Both benches run stackgate with
//! [`bench_policy_files`]: the embedded policies with the namespace `openstack` pinned to a
//! static release, so the Glance cases are annotated without a cluster (the path a
//! `--kube off` install takes). `Case::patches` says what stackgate must do; the load bench
//! checks it before measuring.

#![allow(dead_code)] // Each bench binary uses a part of this module.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// How a captured review is turned into the benchmarked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The captured body, unchanged.
    AsCaptured,
    /// The object renamed to `default/app-settings` (no site, no label): a ConfigMap no rule
    /// reads, i.e. the pass-through cost of every write the webhook is registered for.
    NonMatching,
    /// The Glance CR with `spec.customServiceConfig` grown until the body is about this
    /// many bytes (a large custom resource; above `INLINE_MAX_BYTES` it is evaluated on the
    /// blocking pool by the server).
    PaddedTo(usize),
    /// The Flux HelmRelease with `provider-requires-serial-api-calls` taken out of
    /// `spec.values.cloudConfig.loadBalancer` (the captured one sets it): the values a team
    /// forgot, which stackgate patches.
    SerialKeyRemoved,
}

/// One benchmarked review.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// Short name, used as the benchmark id and in the load report.
    pub name: &'static str,
    /// Webhook path the review is posted to (`/mutate` or `/validate`).
    pub path: &'static str,
    /// Fixture under `tests/fixtures/captured/`.
    pub fixture: &'static str,
    /// What is done to it.
    pub shape: Shape,
    /// What the case stands for (printed in reports).
    pub about: &'static str,
    /// Whether stackgate answers this case with a patch (checked before measuring).
    pub patches: bool,
}

/// In-process cases (`benches/engine.rs`): one per rule family plus a non-matching object.
pub const ENGINE_CASES: &[Case] = &[
    Case {
        name: "configmap-cloud-config",
        path: "/mutate",
        fixture: "configmap/mutate-create-cloud-provider-config.json",
        shape: Shape::AsCaptured,
        about: "ConfigMap openshift-config/cloud-provider-config, serial line missing: patched",
        patches: true,
    },
    Case {
        name: "configmap-cloud-config-validate",
        path: "/validate",
        fixture: "configmap/validate-update-cloud-provider-config-serial-false.json",
        shape: Shape::AsCaptured,
        about: "UPDATE with provider-requires-serial-api-calls = false: denied",
        patches: false,
    },
    Case {
        name: "secret-cloud-config",
        path: "/mutate",
        fixture: "secret/mutate-create-cloud-config-from-file.json",
        shape: Shape::AsCaptured,
        about: "Secret kube-system/cloud-config (base64 data): patched",
        patches: true,
    },
    Case {
        name: "deployment-ccm",
        path: "/validate",
        fixture: "deployment/validate-create-openstack-cloud-controller-manager.json",
        shape: Shape::AsCaptured,
        about: "CCM Deployment (ccm-concurrency reads the container args)",
        patches: false,
    },
    Case {
        name: "helmrelease-values",
        path: "/mutate",
        fixture: "helmrelease/mutate-create-openstack-cloud-controller-manager.json",
        shape: Shape::SerialKeyRemoved,
        about: "Flux HelmRelease with cloudConfig values, serial key missing: patched",
        patches: true,
    },
    Case {
        name: "glance-100k",
        path: "/mutate",
        fixture: "glance/mutate-create-glance.json",
        shape: Shape::PaddedTo(100 * 1024),
        about: "Glance CR grown to 100 KB: release annotations added",
        patches: true,
    },
    Case {
        name: "non-matching",
        path: "/mutate",
        fixture: "configmap/mutate-create-cloud-provider-config.json",
        shape: Shape::NonMatching,
        about: "ConfigMap default/app-settings: no site, no label",
        patches: false,
    },
];

/// Over-HTTPS cases (`benches/loadbench.rs`), the five of issue #7.
pub const LOAD_CASES: &[Case] = &[
    Case {
        name: "configmap-mutate",
        path: "/mutate?timeout=10s",
        fixture: "configmap/mutate-create-cloud-provider-config.json",
        shape: Shape::AsCaptured,
        about: "ConfigMap cloud config, patched",
        patches: true,
    },
    Case {
        name: "secret-mutate",
        path: "/mutate?timeout=10s",
        fixture: "secret/mutate-create-cloud-config-from-file.json",
        shape: Shape::AsCaptured,
        about: "Secret cloud config, patched",
        patches: true,
    },
    Case {
        name: "helmrelease-mutate",
        path: "/mutate?timeout=10s",
        fixture: "helmrelease/mutate-create-openstack-cloud-controller-manager.json",
        shape: Shape::SerialKeyRemoved,
        about: "HelmRelease values, patched",
        patches: true,
    },
    Case {
        name: "glance-annotate",
        path: "/mutate?timeout=10s",
        fixture: "glance/mutate-create-glance.json",
        shape: Shape::AsCaptured,
        about: "Glance CR, release annotations added (static release for the namespace)",
        patches: true,
    },
    Case {
        name: "non-matching",
        path: "/mutate?timeout=10s",
        fixture: "configmap/mutate-create-cloud-provider-config.json",
        shape: Shape::NonMatching,
        about: "ConfigMap no rule reads",
        patches: false,
    },
];

/// `tests/fixtures/captured/` of this package.
pub fn captured_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/captured")
}

/// The release the benches pin the namespace `openstack` to (from the static table in
/// `policies/release-catalog.yaml`): Glance WSGI on, location API off.
pub const BENCH_RELEASE: &str = "openstack-operator-84322c77";

/// The repository's `policies/*.yaml` as (file name, text), with `release-annotations.yaml`
/// naming [`BENCH_RELEASE`] for the namespace `openstack`.
pub fn bench_policy_files() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("policy directory entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (name, text)
        })
        .filter(|(name, _)| name.ends_with(".yaml"))
        .collect();
    files.sort();
    let release = files
        .iter_mut()
        .find(|(name, _)| name == "release-annotations.yaml")
        .expect("policies/release-annotations.yaml");
    let params = "params:\n";
    let at = release
        .1
        .find(params)
        .expect("release-annotations.yaml has params");
    release.1.insert_str(
        at + params.len(),
        &format!("  namespaceReleases:\n    openstack: {BENCH_RELEASE}\n"),
    );
    files
}

impl Case {
    /// The request body, or `None` (with the reason) when the fixture is missing.
    ///
    /// An edited body keeps the captured key order (the API server's: `metadata` before
    /// `data` or `spec`), because stackgate's decoder reads the API server's order in one
    /// pass and other orders in two: a body re-serialized through `serde_json::Value`, whose
    /// objects sort their keys, would measure a path the API server never takes. The edit
    /// is made on an [`Ordered`] tree and checked equal, as JSON values, to the same edit
    /// made on a `serde_json::Value`.
    pub fn body(&self) -> Result<Vec<u8>, String> {
        let path = captured_dir().join(self.fixture);
        let raw = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if self.shape == Shape::AsCaptured {
            return Ok(raw);
        }
        let not_json = |e: serde_json::Error| format!("{}: not JSON: {e}", path.display());
        let mut reference: Value = serde_json::from_slice(&raw).map_err(not_json)?;
        let mut review: Ordered = serde_json::from_slice(&raw).map_err(not_json)?;
        match self.shape {
            Shape::AsCaptured => {}
            Shape::NonMatching => {
                rename(&mut reference, "default", "app-settings");
                review.rename("default", "app-settings");
            }
            Shape::PaddedTo(size) => {
                pad_custom_service_config(&mut reference, size);
                review.pad_custom_service_config(size);
            }
            Shape::SerialKeyRemoved => {
                let removed = reference
                    .pointer_mut("/request/object/spec/values/cloudConfig/loadBalancer")
                    .and_then(Value::as_object_mut)
                    .and_then(|lb| lb.remove("provider-requires-serial-api-calls"));
                let removed_ordered = review
                    .pointer_mut(&[
                        "request",
                        "object",
                        "spec",
                        "values",
                        "cloudConfig",
                        "loadBalancer",
                    ])
                    .and_then(|lb| lb.remove("provider-requires-serial-api-calls"));
                if removed.is_none() || removed_ordered.is_none() {
                    return Err(format!("{}: no serial key to remove", path.display()));
                }
            }
        }
        let body = serde_json::to_vec(&review).map_err(|e| e.to_string())?;
        let sent: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
        if sent != reference {
            return Err(format!(
                "{}: the order-keeping edit differs from the serde_json::Value edit",
                path.display()
            ));
        }
        Ok(body)
    }
}

/// A JSON value whose objects keep their keys in the order they were read (`serde_json`'s
/// `Value` sorts them unless its `preserve_order` feature is on, and turning that on for the
/// benches would turn it on for the crate they measure).
#[derive(Debug, Clone)]
enum Ordered {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl Ordered {
    /// The member `key` of an object.
    fn get_mut(&mut self, key: &str) -> Option<&mut Ordered> {
        match self {
            Ordered::Object(members) => members.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value under these object keys, if every step is an object that has it.
    fn pointer_mut(&mut self, keys: &[&str]) -> Option<&mut Ordered> {
        keys.iter().try_fold(self, |at, key| at.get_mut(key))
    }

    /// Sets `key` in an object: in place when it is there, else appended.
    fn insert(&mut self, key: &str, value: Ordered) {
        if let Ordered::Object(members) = self {
            match members.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => members.push((key.to_owned(), value)),
            }
        }
    }

    /// Takes `key` out of an object.
    fn remove(&mut self, key: &str) -> Option<Ordered> {
        match self {
            Ordered::Object(members) => {
                let at = members.iter().position(|(k, _)| k == key)?;
                Some(members.remove(at).1)
            }
            _ => None,
        }
    }

    /// [`rename`] on this tree.
    fn rename(&mut self, namespace: &str, name: &str) {
        let string = |s: &str| Ordered::String(s.to_owned());
        let Some(request) = self.get_mut("request") else {
            return;
        };
        request.insert("namespace", string(namespace));
        request.insert("name", string(name));
        for which in ["object", "oldObject"] {
            if let Some(meta @ Ordered::Object(_)) = request.pointer_mut(&[which, "metadata"]) {
                meta.insert("namespace", string(namespace));
                meta.insert("name", string(name));
                meta.remove("annotations");
            }
        }
    }

    /// [`pad_custom_service_config`] on this tree.
    fn pad_custom_service_config(&mut self, size: usize) {
        let current = serde_json::to_vec(self).map(|v| v.len()).unwrap_or(0);
        let Some(spec) = self.pointer_mut(&["request", "object", "spec"]) else {
            return;
        };
        let mut config = match spec.get_mut("customServiceConfig") {
            Some(Ordered::String(text)) => text.clone(),
            _ => "[DEFAULT]\n".to_owned(),
        };
        let mut n = 0;
        while current + config.len() < size {
            config.push_str(&backend_section(n));
            n += 1;
        }
        spec.insert("customServiceConfig", Ordered::String(config));
    }
}

impl serde::Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Ordered::Null => serializer.serialize_unit(),
            Ordered::Bool(b) => serializer.serialize_bool(*b),
            Ordered::Number(n) => n.serialize(serializer),
            Ordered::String(s) => serializer.serialize_str(s),
            Ordered::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Ordered::Object(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (k, v) in members {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<Ordered, E> {
                Ok(Ordered::Bool(b))
            }
            fn visit_i64<E>(self, n: i64) -> Result<Ordered, E> {
                Ok(Ordered::Number(n.into()))
            }
            fn visit_u64<E>(self, n: u64) -> Result<Ordered, E> {
                Ok(Ordered::Number(n.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Ordered, E> {
                serde_json::Number::from_f64(n)
                    .map(Ordered::Number)
                    .ok_or_else(|| E::custom("a number JSON cannot hold"))
            }
            fn visit_str<E>(self, s: &str) -> Result<Ordered, E> {
                Ok(Ordered::String(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<Ordered, E> {
                Ok(Ordered::String(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Ordered::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Ordered, A::Error> {
                let mut members: Vec<(String, Ordered)> = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Ordered>()? {
                    // A repeated key: the last one wins, as in serde_json's Value.
                    match members.iter_mut().find(|(seen, _)| *seen == k) {
                        Some((_, old)) => *old = v,
                        None => members.push((k, v)),
                    }
                }
                Ok(Ordered::Object(members))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// Moves the object to `namespace/name` in the request and in the object.
fn rename(review: &mut Value, namespace: &str, name: &str) {
    let request = &mut review["request"];
    request["namespace"] = namespace.into();
    request["name"] = name.into();
    for which in ["object", "oldObject"] {
        if let Some(meta) = request
            .get_mut(which)
            .and_then(|o| o.get_mut("metadata"))
            .and_then(Value::as_object_mut)
        {
            meta.insert("namespace".into(), namespace.into());
            meta.insert("name".into(), name.into());
            meta.remove("annotations");
        }
    }
}

/// Appends INI lines to `request.object.spec.customServiceConfig` until the serialized
/// review is at least `size` bytes.
fn pad_custom_service_config(review: &mut Value, size: usize) {
    let current = serde_json::to_vec(review).map(|v| v.len()).unwrap_or(0);
    let spec = &mut review["request"]["object"]["spec"];
    let mut config = spec["customServiceConfig"]
        .as_str()
        .unwrap_or("[DEFAULT]\n")
        .to_owned();
    let mut n = 0;
    while current + config.len() < size {
        config.push_str(&backend_section(n));
        n += 1;
    }
    spec["customServiceConfig"] = config.into();
}

/// The `n`th INI section the Glance padding appends.
fn backend_section(n: usize) -> String {
    format!(
        "[backend_{n}]\nrbd_store_pool = images-{n}\nrbd_store_user = openstack\nrbd_store_ceph_conf = /etc/ceph/ceph-{n}.conf\nstore_description = \"RBD backend {n}\"\n"
    )
}
