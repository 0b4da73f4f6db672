//! The registry of delivery paths (`src/sites/delivery.rs`) against the faces that must agree
//! with it: the chart's webhook rules (rendered by `.ci/chart.sh` into
//! `target/chart-render/`), the audit's targets, what `stackgate check` recognises (one sample
//! object per entry, through the engine as the webhook runs it) and `docs/carriers.md`.
//!
//! Run `STACKGATE_BLESS=1 cargo test --test delivery_registry` to rewrite `docs/carriers.md`
//! after changing the registry.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use stackgate::audit;
use stackgate::engine::{Engine, Subject};
use stackgate::policy::PolicySet;
use stackgate::sites::delivery::{Audit, REGISTRY};

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

#[test]
fn the_audit_lists_every_delivery_path_the_registry_names() {
    let listed: BTreeSet<(String, String, String)> = audit::targets(&engine())
        .iter()
        .map(|t| {
            (
                t.resource.group.clone(),
                t.resource.version.clone(),
                t.resource.kind.clone(),
            )
        })
        .collect();
    let mut missing = Vec::new();
    for path in REGISTRY {
        for a in path.audit {
            if let Audit::Listed(group, version, kind) = a {
                let key = (
                    (*group).to_owned(),
                    (*version).to_owned(),
                    (*kind).to_owned(),
                );
                if !listed.contains(&key) {
                    missing.push(format!("{} ({kind} {group}/{version})", path.name));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not listed by `stackgate audit`: {missing:#?}"
    );
    // And every audit target that reads cloud configs or chart values is in the registry.
    let registry: BTreeSet<(&str, &str)> = REGISTRY
        .iter()
        .flat_map(|p| p.audit)
        .filter_map(|a| match a {
            Audit::Listed(g, _, k) => Some((*g, *k)),
            Audit::NotInCluster => None,
        })
        .collect();
    // The audit lists the resource each path's webhook registration names (the plural the
    // CRD serves, which the chart's audit RBAC grants).
    let registered: BTreeSet<(&str, &str)> = REGISTRY
        .iter()
        .filter_map(|p| p.webhook.ok())
        .flatten()
        .flat_map(|r| r.resources.iter().map(move |res| (r.group, *res)))
        .collect();
    for t in audit::targets(&engine()) {
        let sites = t.covered_by.contains("sites") || t.covered_by.contains("CloudConfigSites");
        if sites {
            for ar in std::iter::once(&t.resource).chain(&t.fallbacks) {
                assert!(
                    registered.contains(&(ar.group.as_str(), ar.plural.as_str())),
                    "the audit lists {}/{} ({} {}), which no webhook registration names",
                    ar.group,
                    ar.plural,
                    ar.kind,
                    ar.version
                );
            }
        }
        if sites {
            assert!(
                registry.contains(&(t.resource.group.as_str(), t.resource.kind.as_str())),
                "the audit lists {} {}/{} ({}), which no registry entry names",
                t.resource.kind,
                t.resource.group,
                t.resource.version,
                t.covered_by
            );
        }
    }
}

/// One object per registry entry, in the shape a user writes it, that carries a cloud config
/// the engine must find (or say it cannot see).
fn samples() -> Vec<(&'static str, Value)> {
    let values = "cloudConfig:\n  global:\n    region: RegionOne\n";
    let k0s_config = json!({"apiVersion": "k0s.k0sproject.io/v1beta1", "kind": "ClusterConfig",
        "metadata": {"name": "k0s"},
        "spec": {"extensions": {"helm": {"charts": [{"name": "occm",
            "chartname": "openstack/openstack-cloud-controller-manager",
            "namespace": "kube-system", "values": values}]}}}});
    let inner_secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  \
                        namespace: kube-system\nstringData:\n  cloud.conf: |\n    [Global]\n    region = r\n";
    vec![
        (
            "ConfigMap / Secret cloud-config site",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloud-config", "namespace": "kube-system"},
            "stringData": {"cloud.conf": "[Global]\nregion = r\n"}}),
        ),
        (
            "Labelled values ConfigMap / Secret",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "occm-values", "namespace": "kube-system",
                "labels": {"stackgate.dev/ccm-values": "values.yaml"}},
            "data": {"values.yaml": values}}),
        ),
        (
            "Cluster API ClusterResourceSet payload",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "crs", "namespace": "default"},
            "type": "addons.cluster.x-k8s.io/resource-set",
            "stringData": {"p.yaml": inner_secret}}),
        ),
        (
            "Flux HelmRelease",
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager"}},
                "values": {"cloudConfig": {"global": {"region": "r"}}}}}),
        ),
        (
            "Argo CD Application",
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "occm", "namespace": "argocd"},
            "spec": {"source": {"chart": "openstack-cloud-controller-manager",
                "helm": {"values": values}}}}),
        ),
        (
            "RKE2/k3s helm-controller HelmChart and HelmChartConfig",
            json!({"apiVersion": "helm.cattle.io/v1",
            "kind": "HelmChart", "metadata": {"name": "occm", "namespace": "kube-system"},
            "spec": {"chart": "openstack-cloud-controller-manager", "valuesContent": values}}),
        ),
        ("k0s ClusterConfig", {
            let mut c = k0s_config.clone();
            c["metadata"]["namespace"] = json!("kube-system");
            c
        }),
        (
            "k0smotron control plane (a k0s ClusterConfig inside)",
            json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "K0smotronControlPlane",
            "metadata": {"name": "cp", "namespace": "default"},
            "spec": {"k0sConfig": k0s_config.clone()}}),
        ),
        (
            "k0smotron Cluster (a k0s ClusterConfig inside)",
            json!({
            "apiVersion": "k0smotron.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "k", "namespace": "default"},
            "spec": {"k0sConfig": k0s_config.clone()}}),
        ),
        (
            "k0sctl Cluster (a k0s ClusterConfig inside)",
            json!({
            "apiVersion": "k0sctl.k0sproject.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "k0s-cluster"},
            "spec": {"k0s": {"config": k0s_config.clone()}}}),
        ),
        (
            "Azimuth cluster-api-addon-provider HelmRelease (also Magnum's CAPI driver)",
            json!({
            "apiVersion": "addons.stackhpc.com/v1alpha1", "kind": "HelmRelease",
            "metadata": {"name": "ccm", "namespace": "default"},
            "spec": {"chart": {"repo": "https://kubernetes.github.io/cloud-provider-openstack",
                "name": "openstack-cloud-controller-manager", "version": "2.31.1"},
                "valuesSources": [{"template": "cluster:\n  name: {{ cluster.metadata.name }}\n"}]}}),
        ),
        (
            "Azimuth cluster-api-addon-provider Manifests",
            json!({
            "apiVersion": "addons.stackhpc.com/v1alpha1", "kind": "Manifests",
            "metadata": {"name": "cloud-config", "namespace": "default"},
            "spec": {"manifestSources": [{"template": inner_secret}]}}),
        ),
        (
            "Giant Swarm App (cloud-provider-openstack-app)",
            json!({
            "apiVersion": "application.giantswarm.io/v1alpha1", "kind": "App",
            "metadata": {"name": "cloud-provider-openstack", "namespace": "org-acme"},
            "spec": {"name": "cloud-provider-openstack-app", "catalog": "default",
                "userConfig": {"configMap": {"name": "cpo-user-values", "namespace": "org-acme"}}}}),
        ),
        (
            "Plain Helm values file",
            json!({"apiVersion": "stackgate.dev/v1alpha1", "kind": "HelmValues",
            "metadata": {"name": "values.yaml"}, "chart": "openstack-cloud-controller-manager",
            "values": {"cloudConfig": {"global": {"region": "r"}}}}),
        ),
        (
            "Plain INI cloud.conf",
            json!({"apiVersion": "stackgate.dev/v1alpha1", "kind": "CloudConfigFile",
            "metadata": {"name": "cloud.conf"}, "text": "[Global]\nregion = r\n"}),
        ),
    ]
}

fn gvk_of(object: &Value) -> kube::core::GroupVersionKind {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    kube::core::GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap_or_default())
}

#[test]
fn check_recognises_every_delivery_path_of_the_registry() {
    let engine = engine();
    let samples = samples();
    for path in REGISTRY {
        let (_, object) = samples
            .iter()
            .find(|(name, _)| *name == path.name)
            .unwrap_or_else(|| panic!("no sample for registry entry {:?}", path.name));
        let gvk = gvk_of(object);
        assert!(
            path.kinds.contains(&gvk.kind.as_str())
                && path.group == gvk.group
                && path.versions.contains(&gvk.version.as_str()),
            "{}: the sample is not one of the entry's kinds",
            path.name
        );
        let dynamic: kube::core::DynamicObject =
            serde_json::from_value(object.clone()).expect("object");
        let verdict = engine.evaluate(&Subject::create(&gvk, &dynamic));
        // A site is found: the serial rule speaks (warns, patches) or an unseen warning says
        // what cannot be seen.
        let said: Vec<String> = verdict
            .warnings
            .iter()
            .chain(&verdict.mutations)
            .map(|f| f.message.clone())
            .collect();
        let unseen = path.sources.iter().all(|s| !s.read);
        if unseen {
            assert!(
                said.iter().any(|m| m.contains("cannot see")),
                "{}: no finding says its values are unseen: {said:#?}",
                path.name
            );
        } else {
            assert!(
                said.iter()
                    .any(|m| m.contains("provider-requires-serial-api-calls")),
                "{}: the engine found no cloud config in the sample: {said:#?}",
                path.name
            );
        }
    }
    assert_eq!(
        samples.len(),
        REGISTRY.len(),
        "a sample without a registry entry"
    );
}

#[test]
fn docs_carriers_md_is_generated_from_the_registry() {
    let expected = stackgate::sites::delivery::carriers_markdown();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/carriers.md");
    if std::env::var_os("STACKGATE_BLESS").is_some() {
        std::fs::write(path, &expected).expect("write docs/carriers.md");
    }
    let actual = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        actual == expected,
        "docs/carriers.md is stale: run `STACKGATE_BLESS=1 cargo test --test delivery_registry`"
    );
}

/// (group, version, resource) of every rule of the delivery-path webhooks in one render.
fn chart_rules(text: &str) -> (BTreeSet<(String, String, String)>, BTreeSet<String>) {
    let mut rules = BTreeSet::new();
    let mut names = BTreeSet::new();
    for doc in stackgate::yaml::parse_stream(text).expect("render parses") {
        let v = doc.root.to_json().expect("json");
        if !matches!(
            v["kind"].as_str(),
            Some("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration")
        ) {
            continue;
        }
        for wh in v["webhooks"].as_array().into_iter().flatten() {
            let name = wh["name"].as_str().unwrap_or_default();
            let delivery = [
                "cloud-config-",
                "ccm-values-labelled.",
                "crs-payloads.",
                "gitops.",
            ]
            .iter()
            .any(|p| name.starts_with(p));
            if !delivery {
                continue;
            }
            names.insert(name.split('.').next().unwrap_or_default().to_owned());
            for rule in wh["rules"].as_array().into_iter().flatten() {
                for g in rule["apiGroups"].as_array().into_iter().flatten() {
                    for ver in rule["apiVersions"].as_array().into_iter().flatten() {
                        for r in rule["resources"].as_array().into_iter().flatten() {
                            rules.insert((
                                g.as_str().unwrap_or_default().to_owned(),
                                ver.as_str().unwrap_or_default().to_owned(),
                                r.as_str().unwrap_or_default().to_owned(),
                            ));
                        }
                    }
                }
            }
        }
    }
    (rules, names)
}

#[test]
#[ignore = "needs the rendered chart in target/chart-render: run .ci/chart.sh (installs Helm)"]
fn the_chart_registers_the_webhooks_the_registry_asks_for() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/chart-render");
    let text = std::fs::read_to_string(dir.join("default.yaml"))
        .expect("target/chart-render/default.yaml: run .ci/chart.sh");
    let (rendered, names) = chart_rules(&text);
    let wanted: BTreeSet<(String, String, String)> = REGISTRY
        .iter()
        .filter_map(|p| p.webhook.ok())
        .flatten()
        .flat_map(|r| {
            r.versions.iter().flat_map(move |v| {
                r.resources
                    .iter()
                    .map(move |res| (r.group.to_owned(), (*v).to_owned(), (*res).to_owned()))
            })
        })
        .collect();
    let missing: Vec<_> = wanted.difference(&rendered).collect();
    let extra: Vec<_> = rendered.difference(&wanted).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "chart webhook rules disagree with src/sites/delivery.rs: not registered {missing:#?}; \
         registered but not in the registry {extra:#?}"
    );
    // Both webhook configurations carry the payload webhook (validating and mutating).
    assert!(names.contains("crs-payloads"), "{names:?}");
    let both = text.matches("name: crs-payloads.").count();
    assert_eq!(both, 2, "crs-payloads in both configurations");
    // Without matchConditions, payload Secrets are sent only from the listed namespaces.
    let legacy = std::fs::read_to_string(dir.join("legacy-ccm.yaml")).expect("legacy render");
    assert_eq!(legacy.matches("name: crs-payloads.").count(), 2);
    let kube_127 = std::fs::read_to_string(dir.join("kube-1.27.yaml")).expect("1.27 render");
    assert_eq!(
        kube_127.matches("name: crs-payloads.").count(),
        0,
        "no namespaces listed, no matchConditions: no webhook sends every Secret"
    );
}
