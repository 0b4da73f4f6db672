//! The registry of delivery paths (`src/sites/delivery.rs`) against the faces that must agree
//! with it: the chart's webhook rules (rendered by `.ci/chart.sh` into
//! `target/chart-render/`), the audit's targets, what `stackgate check` recognises (one sample
//! object per entry, through the engine as the webhook runs it) and `docs/carriers.md`.
//!
//! Run `STACKGATE_BLESS=1 cargo test --test delivery_registry` to rewrite `docs/carriers.md`
//! after changing the registry.

#[path = "support/review.rs"]
mod review;

use std::collections::BTreeSet;

use clap::Parser;
use serde_json::{Value, json};
use stackgate::admission::{self, Webhook};
use stackgate::audit;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::{CODE_UNSEEN, Engine, Facts, Subject};
use stackgate::facts::ccm_config::CcmConfigReads;
use stackgate::facts::ccm_workload::CcmMarkers;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::sites::delivery::{Audit, REGISTRY, UnseenAt};

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
            // Read by the DaemonSet of `ccm_reader()`; no site names it.
            "Whatever a CCM workload mounts as `--cloud-config`",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "occm-cloud-config", "namespace": "kube-system"},
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
            // Named through a `chartRef` named after the chart, so the registry's unnamed
            // `chartRef` replaces it.
            "spec": {"chartRef": {"kind": "OCIRepository", "name": "openstack-cloud-controller-manager"},
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
            "Argo CD ApplicationSet",
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
            "metadata": {"name": "occm", "namespace": "argocd"},
            "spec": {"generators": [{"list": {"elements": [{"cluster": "a"}]}}],
                "template": {"metadata": {"name": "occm"},
                    "spec": {"source": {"chart": "openstack-cloud-controller-manager",
                        "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                        "targetRevision": "2.31.1", "helm": {"values": values}},
                        "destination": {"server": "https://kubernetes.default.svc"}}}}}),
        ),
        (
            "Sveltos ClusterProfile / Profile `helmCharts`",
            json!({"apiVersion": "config.projectsveltos.io/v1beta1", "kind": "Profile",
            "metadata": {"name": "occm", "namespace": "default"},
            "spec": {"helmCharts": [{"repositoryURL": "https://kubernetes.github.io/cloud-provider-openstack",
                "repositoryName": "cpo", "chartName": "cpo/openstack-cloud-controller-manager",
                "chartVersion": "2.31.1", "releaseName": "occm", "releaseNamespace": "kube-system",
                "helmChartAction": "Install", "values": values}]}}),
        ),
        (
            "Rancher Fleet HelmOp / Bundle",
            json!({"apiVersion": "fleet.cattle.io/v1alpha1", "kind": "HelmOp",
            "metadata": {"name": "occm", "namespace": "fleet-default"},
            "spec": {"helm": {"chart": "openstack-cloud-controller-manager",
                "repo": "https://kubernetes.github.io/cloud-provider-openstack", "version": "2.31.1",
                "values": {"cloudConfig": {"global": {"region": "r"}}}}}}),
        ),
        (
            "Rancher Fleet `fleet.yaml`",
            json!({"apiVersion": "stackgate.dev/v1alpha1", "kind": "FleetYaml",
            "metadata": {"name": "fleet.yaml"}, "defaultNamespace": "kube-system",
            "helm": {"chart": "openstack-cloud-controller-manager",
                "repo": "https://kubernetes.github.io/cloud-provider-openstack", "version": "2.31.1",
                "values": {"cloudConfig": {"global": {"region": "r"}}}}}),
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
                // A template-free template: read as the values it is.
                "valuesSources": [{"template": "cloudConfig:\n  global:\n    region: r\n"}]}}),
        ),
        (
            "Azimuth cluster-api-addon-provider Manifests",
            json!({
            "apiVersion": "addons.stackhpc.com/v1alpha1", "kind": "Manifests",
            "metadata": {"name": "cloud-config", "namespace": "default"},
            "spec": {"manifestSources": [{"template": inner_secret}]}}),
        ),
        (
            "k0s Chart (helm.k0sproject.io)",
            json!({
            "apiVersion": "helm.k0sproject.io/v1beta1", "kind": "Chart",
            "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
            "spec": {"chartName": "openstack-cloud-controller-manager/openstack-cloud-controller-manager",
                "version": "2.35.0", "namespace": "kube-system", "values": values}}),
        ),
        (
            "Rancher provisioning Cluster (RKE2/k3s `additionalManifest`)",
            json!({
            "apiVersion": "provisioning.cattle.io/v1", "kind": "Cluster",
            "metadata": {"name": "downstream", "namespace": "fleet-default"},
            "spec": {"kubernetesVersion": "v1.31.4+rke2r1",
                "rkeConfig": {"additionalManifest": format!(
                    "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: occm\n  \
                     namespace: kube-system\nspec:\n  chart: openstack-cloud-controller-manager\n  \
                     repo: https://kubernetes.github.io/cloud-provider-openstack\n  valuesContent: |\n    {}\n",
                    values.trim_end().replace('\n', "\n    "))}}}),
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
            "Talos machine config `cluster.inlineManifests`",
            json!({"apiVersion": "stackgate.dev/v1alpha1", "kind": "TalosMachineConfig",
            "metadata": {"name": "controlplane.yaml"}, "version": "v1alpha1",
            "machine": {"type": "controlplane"},
            "cluster": {"inlineManifests": [{"name": "cloud-config", "contents": inner_secret}]}}),
        ),
        (
            "KubeOne manifest `cloudProvider.cloudConfig`",
            json!({"apiVersion": "kubeone.k8c.io/v1beta2", "kind": "KubeOneCluster",
            "name": "demo", "cloudProvider": {"openstack": {}, "external": true,
                "cloudConfig": "[Global]\nregion = r\n"}}),
        ),
        (
            "kustomize `helmCharts[]` (`kubectl kustomize --enable-helm`)",
            json!({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "metadata": {"name": "kustomization.yaml"},
            "helmCharts": [{"name": "openstack-cloud-controller-manager",
                "repo": "https://kubernetes.github.io/cloud-provider-openstack",
                "version": "2.31.1", "releaseName": "occm", "namespace": "kube-system",
                "valuesInline": {"cloudConfig": {"global": {"region": "r"}}}}]}),
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

/// The facts a face has for `path`'s sample: for the CCM-read path, the `CcmConfigSource`
/// fact of a DaemonSet whose CCM reads the sample Secret (the chart's shape with
/// `secret.name: occm-cloud-config`); none for the others.
fn facts_for(engine: &Engine, path: &str) -> Facts {
    if !path.contains("CCM workload") {
        return Facts::default();
    }
    let daemonset: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"template": {"spec": {
            "containers": [{"name": "occm",
                "image": "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.31.0",
                "args": ["--cloud-config=/etc/config/cloud.conf"],
                "volumeMounts": [{"name": "cfg", "mountPath": "/etc/config"}]}],
            "volumes": [{"name": "cfg", "secret": {"secretName": "occm-cloud-config"}}]}}}
    }))
    .expect("DaemonSet");
    let gvk = kube::core::GroupVersionKind::gvk("apps", "v1", "DaemonSet");
    let params = engine.ccm_marker_params();
    let markers = CcmMarkers::new(&params.ccm_images, &params.ccm_args);
    let mut reads = CcmConfigReads::default();
    reads.add_workload(&gvk, &daemonset, &markers);
    Facts::of_ccm_reads(std::sync::Arc::new(reads))
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
        let verdict = engine.evaluate_with(
            &Subject::create(&gvk, &dynamic),
            &facts_for(&engine, path.name),
        );
        // A site is found: the serial rule speaks (warns, patches) or an unseen warning says
        // what cannot be seen.
        let said: Vec<String> = verdict
            .warnings
            .iter()
            .chain(&verdict.mutations)
            .map(|f| f.denial_text())
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

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

/// What both faces say of `object`: the webhook's warnings (`/validate`, in process) and
/// `stackgate check`'s items over a file holding it, as `(code, message)`.
fn both_faces(
    engine: &Engine,
    object: &Value,
) -> (Vec<String>, Vec<(Option<&'static str>, String)>) {
    let body = review::review_for(object, "registry");
    let reply = admission::handle(
        engine,
        Webhook::Validate,
        &serde_json::to_vec(&body).expect("encode"),
        &Metrics::new(),
    );
    assert_eq!(reply.status, 200);
    let response =
        serde_json::from_slice::<Value>(&reply.body).expect("review")["response"].clone();
    let warnings = response["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("object.json");
    std::fs::write(&file, object.to_string()).expect("write");
    let argv = ["check".to_owned(), file.display().to_string()];
    let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args);
    let report = check::check(&options, engine, &mut std::io::empty()).expect("check runs");
    let items = report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .map(|i| (i.code, i.message.clone()))
        .collect();
    (warnings, items)
}

/// The keys of a JSON pointer (`/spec/valuesFrom` → `spec`, `valuesFrom`).
fn pointer_keys(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|k| k.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// How messages name the field at `pointer`: `spec.valuesFrom`, with a key that holds a dot
/// in brackets (`stringData["cloud-config.yaml"]`).
fn named(pointer: &str) -> String {
    let mut out = String::new();
    for key in pointer_keys(pointer) {
        if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{key}]"));
        } else if key.contains('.') {
            out.push_str(&format!("[{key:?}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(&key);
        }
    }
    out
}

/// `object` with `value` at `pointer`, creating the maps on the way.
fn set_at(object: &mut Value, pointer: &str, value: Value) {
    let keys = pointer_keys(pointer);
    let (last, parents) = keys.split_last().expect("a pointer below the root");
    let mut at = object;
    for key in parents {
        // A list on the way is indexed; a map gets the key (created when missing).
        if at.is_array() {
            let i: usize = key
                .parse()
                .expect("an index into a list on the pointer's way");
            at = at.get_mut(i).expect("an item on the pointer's way");
            continue;
        }
        at = at
            .as_object_mut()
            .expect("a map on the pointer's way")
            .entry(key.clone())
            .or_insert_with(|| json!({}));
    }
    at.as_object_mut()
        .expect("a map at the pointer's parent")
        .insert(last.clone(), value);
}

fn remove_at(object: &mut Value, pointer: &str) {
    let keys = pointer_keys(pointer);
    let (last, parents) = keys.split_last().expect("a pointer below the root");
    let parent = format!(
        "{}{}",
        if parents.is_empty() { "" } else { "/" },
        parents.join("/")
    );
    if let Some(map) = object.pointer_mut(&parent).and_then(Value::as_object_mut) {
        map.remove(last);
    }
}

/// Every unseen values source a registry entry declares is said to be unseen, by name, by the
/// webhook and by `stackgate check`: its field set (with a value of its shape) on the entry's
/// sample makes both faces warn `values-unseen` naming the field, and the sample without it
/// is read (the serial rule speaks, nothing is unseen) wherever the entry has a read source.
#[test]
fn every_unseen_source_of_the_registry_is_said_to_be_unseen_by_both_faces() {
    let engine = engine();
    let samples = samples();
    let mut checked = 0;
    for path in REGISTRY {
        let (_, sample) = samples
            .iter()
            .find(|(name, _)| *name == path.name)
            .unwrap_or_else(|| panic!("no sample for registry entry {:?}", path.name));
        let unseen: Vec<(&str, UnseenAt)> = path
            .sources
            .iter()
            .filter(|s| !s.read)
            .map(|s| {
                let at = s.unseen_at.unwrap_or_else(|| {
                    panic!(
                        "{}: unseen source {:?} without unseen_at",
                        path.name, s.field
                    )
                });
                (s.field, at)
            })
            .collect();
        assert!(
            path.sources
                .iter()
                .all(|s| !s.read || s.unseen_at.is_none()),
            "{}: a read source with unseen_at",
            path.name
        );
        let reads = path.sources.iter().any(|s| s.read);
        if reads && !unseen.is_empty() {
            // Without the unseen fields the sample's values are read.
            let (warnings, items) = both_faces(&engine, sample);
            assert!(
                !warnings.iter().any(|w| w.contains("cannot see"))
                    && warnings
                        .iter()
                        .any(|w| w.contains("provider-requires-serial-api-calls")),
                "{}: the webhook does not read the sample: {warnings:#?}",
                path.name
            );
            assert!(
                !items.iter().any(|(code, _)| *code == Some(CODE_UNSEEN))
                    && items
                        .iter()
                        .any(|(_, m)| m.contains("provider-requires-serial-api-calls")),
                "{}: check does not read the sample: {items:#?}",
                path.name
            );
        }
        for (field, at) in &unseen {
            let mut object = sample.clone();
            if !reads {
                // Only unseen sources: the sample holds one; set each alone.
                for (_, other) in &unseen {
                    remove_at(&mut object, other.pointer);
                }
            }
            let example: Value = serde_json::from_str(at.example)
                .unwrap_or_else(|e| panic!("{}: {field}: example is not JSON: {e}", path.name));
            set_at(&mut object, at.pointer, example);
            let named = named(at.pointer);
            let (warnings, items) = both_faces(&engine, &object);
            // A post-renderer is not a values source: the values are checked, and the warning
            // says what the post-renderers may change after that.
            let said = |w: &str| {
                w.contains("values come from") || w.contains("after stackgate checked the values")
            };
            assert!(
                warnings.iter().any(|w| w.contains(&named) && said(w)),
                "{}: {field} set at {}: no webhook warning says values come from {named}: \
                 {warnings:#?}",
                path.name,
                at.pointer
            );
            assert!(
                items.iter().any(|(code, m)| *code == Some(CODE_UNSEEN)
                    && m.contains(&named)
                    && m.contains("cannot see")),
                "{}: {field} set at {}: no check item says {CODE_UNSEEN} naming {named}: \
                 {items:#?}",
                path.name,
                at.pointer
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} unseen sources checked");
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

/// A webhook rule for one resource: (group, version, resource, scope).
type Rule = (String, String, String, String);

/// (group, version, resource, scope) of every rule of the delivery-path webhooks in one render.
fn chart_rules(text: &str) -> (BTreeSet<Rule>, BTreeSet<String>) {
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
                "crs-payload-configmaps.",
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
                                rule["scope"].as_str().unwrap_or("*").to_owned(),
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
    // A rule's scope must be the registration's: a `Namespaced` rule never matches a
    // cluster-scoped object.
    let wanted: BTreeSet<Rule> = REGISTRY
        .iter()
        .filter_map(|p| p.webhook.ok())
        .flatten()
        .flat_map(|r| {
            r.versions.iter().flat_map(move |v| {
                r.resources.iter().map(move |res| {
                    (
                        r.group.to_owned(),
                        (*v).to_owned(),
                        (*res).to_owned(),
                        r.scope.as_str().to_owned(),
                    )
                })
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

/// A registry JSON pointer as messages and the registry's prose name it
/// (`/spec/valuesSources/0/template` → `spec.valuesSources[0].template`).
fn dotted(pointer: &str) -> String {
    let mut out = String::new();
    for seg in pointer.split('/').skip(1) {
        if seg.parse::<usize>().is_ok() {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
    }
    out
}

/// Whether `prose` names the field `dotted` (not only a longer field it begins:
/// `spec.values` is not named by `spec.valuesContent`).
fn names_field(prose: &str, dotted: &str) -> bool {
    prose.match_indices(dotted).any(|(at, _)| {
        prose[at + dotted.len()..]
            .chars()
            .next()
            .is_none_or(|c| !c.is_ascii_alphanumeric())
    })
}

#[test]
fn every_typed_place_of_the_registry_is_a_source_its_prose_names() {
    use stackgate::sites::delivery::{ChartUnseen, Operation, Values};
    let mut disagree = Vec::new();
    let mut places = 0;
    for path in REGISTRY {
        for reading in path.values {
            for kind in reading.kinds {
                assert!(
                    path.kinds.contains(kind),
                    "{}: reads {kind}, not one of its kinds",
                    path.name
                );
            }
            let Values::Place(place) = reading.values else {
                continue;
            };
            places += 1;
            let read = |dotted: &str, operation: Option<Operation>| {
                path.sources.iter().any(|s| {
                    s.read
                        && operation.is_none_or(|o| o == s.operation)
                        && names_field(s.field, dotted)
                })
            };
            let unseen = |pointer: &str, operation: Option<Operation>| {
                path.sources.iter().any(|s| {
                    operation.is_none_or(|o| o == s.operation)
                        && s.unseen_at.is_some_and(|u| u.pointer == pointer)
                })
            };
            // The plain values file is the synthetic object's `values`, which the prose calls
            // the file.
            let values = dotted(place.values);
            if !(read(&values, Some(Operation::ValuesFile)) || place.umbrella_dependency) {
                disagree.push(format!("{}: values {values} is no read source", path.name));
            }
            for beneath in place.unseen_beneath {
                let named = path
                    .sources
                    .iter()
                    .any(|s| !s.read && names_field(s.field, &dotted(beneath)));
                if !named {
                    disagree.push(format!("{}: {beneath} is no unseen source", path.name));
                }
            }
            if let Some(at) = place.values_secrets
                && !unseen(at, Some(Operation::ValuesFile))
            {
                disagree.push(format!("{}: {at} is no unseen values file", path.name));
            }
            if let Some(at) = place.set
                && !read(&dotted(at), Some(Operation::Set))
            {
                disagree.push(format!("{}: {at} is no read --set source", path.name));
            }
            if let Some(at) = place.values_over
                && !read(&dotted(at), Some(Operation::ValuesFile))
            {
                disagree.push(format!("{}: {at} is no read values file", path.name));
            }
            match place.chart_unseen {
                Some(ChartUnseen::InlineArchive(at) | ChartUnseen::Reference(at))
                    if !unseen(at, Some(Operation::Chart)) =>
                {
                    disagree.push(format!("{}: {at} is no unseen chart source", path.name));
                }
                _ => {}
            }
        }
    }
    assert!(places >= 6, "only {places} typed places in the registry");
    assert!(
        disagree.is_empty(),
        "the typed places and the prose sources disagree: {disagree:#?}"
    );
}

/// Every reader an entry names exists: each `src/…rs` file in its `reader` text, and each
/// function named in parentheses beside it (`(k0s_places, …)`) is a `fn` in one of those
/// files. The docs' carrier table prints these texts, so a function renamed or deleted by a
/// refactor must not stay named there.
#[test]
fn every_reader_the_registry_names_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in REGISTRY {
        let files: Vec<&str> = entry
            .reader
            .split(|c: char| c.is_whitespace() || c == ',' || c == '(' || c == ')')
            .filter(|t| t.starts_with("src/") && t.ends_with(".rs"))
            .collect();
        assert!(!files.is_empty(), "{}: reader names no file", entry.name);
        let sources: Vec<String> = files
            .iter()
            .map(|f| {
                std::fs::read_to_string(root.join(f))
                    .unwrap_or_else(|e| panic!("{}: reader file {f}: {e}", entry.name))
            })
            .collect();
        let named = entry
            .reader
            .split('(')
            .skip(1)
            .filter_map(|rest| rest.split(')').next())
            .flat_map(|inside| inside.split(", "))
            .map(|t| t.trim_matches('`'))
            .filter(|t| {
                t.contains('_')
                    && t.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            });
        for function in named {
            // Declared plain or generic (`fn name(`, `fn name<'a>(`).
            let declared = [format!("fn {function}("), format!("fn {function}<")];
            assert!(
                sources
                    .iter()
                    .any(|s| declared.iter().any(|d| s.contains(d.as_str()))),
                "{}: reader names {function}, which is not a fn in {files:?}",
                entry.name
            );
        }
    }
}
