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
    pub fn body(&self) -> Result<Vec<u8>, String> {
        let path = captured_dir().join(self.fixture);
        let raw = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if self.shape == Shape::AsCaptured {
            return Ok(raw);
        }
        let mut review: Value = serde_json::from_slice(&raw)
            .map_err(|e| format!("{}: not JSON: {e}", path.display()))?;
        match self.shape {
            Shape::AsCaptured => {}
            Shape::NonMatching => rename(&mut review, "default", "app-settings"),
            Shape::PaddedTo(size) => pad_custom_service_config(&mut review, size),
            Shape::SerialKeyRemoved => {
                let removed = review
                    .pointer_mut("/request/object/spec/values/cloudConfig/loadBalancer")
                    .and_then(Value::as_object_mut)
                    .and_then(|lb| lb.remove("provider-requires-serial-api-calls"));
                if removed.is_none() {
                    return Err(format!("{}: no serial key to remove", path.display()));
                }
            }
        }
        serde_json::to_vec(&review).map_err(|e| e.to_string())
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
        config.push_str(&format!(
            "[backend_{n}]\nrbd_store_pool = images-{n}\nrbd_store_user = openstack\nrbd_store_ceph_conf = /etc/ceph/ceph-{n}.conf\nstore_description = \"RBD backend {n}\"\n"
        ));
        n += 1;
    }
    spec["customServiceConfig"] = config.into();
}
