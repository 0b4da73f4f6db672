//! The `cluster-name` family through the engine: table of CREATE and UPDATE cases over CCM
//! workloads and CCM chart values, the `defaultName` parameter, exemptions, and `check`.

use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use stackgate::engine::{Engine, Operation, Requester, Subject, Verdict};
use stackgate::policy::PolicySet;

const IMAGE: &str = "registry.k8s.io/provider-os/openstack-cloud-controller-manager:v1.36.0";

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn gvk_of(v: &Value) -> GroupVersionKind {
    let api = v["apiVersion"].as_str().unwrap_or_default();
    let (g, ver) = api.split_once('/').unwrap_or(("", api));
    GroupVersionKind::gvk(g, ver, v["kind"].as_str().unwrap_or_default())
}

/// Evaluates a CREATE of `new`, or an UPDATE from `old` to `new`.
fn evaluate_with(engine: &Engine, old: Option<&Value>, new: &Value) -> Verdict {
    let gvk = gvk_of(new);
    let object: DynamicObject = serde_json::from_value(new.clone()).unwrap();
    let old_object: Option<DynamicObject> = old.map(|o| serde_json::from_value(o.clone()).unwrap());
    let admin = ["system:masters".to_owned()];
    let mut subject = Subject::create(&gvk, &object);
    subject.dry_run = false;
    // The webhook's view: a cluster admin writes (the shipped policy lets system:masters
    // exempt).
    subject.requester = Requester::User {
        username: "kubernetes-admin",
        groups: &admin,
    };
    if let Some(old) = &old_object {
        subject.operation = Operation::Update;
        subject.old_object = Some(old);
    }
    engine.evaluate(&subject)
}

fn evaluate(old: Option<&Value>, new: &Value) -> Verdict {
    evaluate_with(&engine(), old, new)
}

fn daemonset(args: Value, env: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [{
            "name": "occm", "image": IMAGE, "args": args, "env": env}]}}}})
}

fn helmrelease(values: Value) -> Value {
    json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"chart": {"spec": {"chart": "openstack-cloud-controller-manager"}},
            "values": values}})
}

fn application(helm: Value) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "occm", "namespace": "argocd"},
        "spec": {"source": {"chart": "openstack-cloud-controller-manager", "helm": helm}}})
}

/// What the cluster-name policy answered.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Clean,
    Warn(&'static str),
    Deny(&'static str),
}

fn outcome(verdict: &Verdict) -> (Outcome, String) {
    let ours = |list: &[stackgate::engine::Finding]| {
        list.iter()
            .filter(|f| f.policy == "cluster-name")
            .map(|f| (f.code, f.denial_text()))
            .collect::<Vec<_>>()
    };
    let denials = ours(&verdict.denials);
    let warnings = ours(&verdict.warnings);
    assert!(
        denials.len() + warnings.len() <= 1,
        "{denials:?} {warnings:?}"
    );
    match (denials.first(), warnings.first()) {
        (Some((code, m)), _) => (Outcome::Deny(code), m.clone()),
        (None, Some((code, m))) => (Outcome::Warn(code), m.clone()),
        (None, None) => (Outcome::Clean, String::new()),
    }
}

/// (name, old object, new object, outcome, needles in the message)
type Case = (
    &'static str,
    Option<Value>,
    Value,
    Outcome,
    &'static [&'static str],
);

#[test]
fn create_and_update_table() {
    let env_kubernetes = json!([{"name": "CLUSTER_NAME", "value": "kubernetes"}]);
    let from_secret =
        json!([{"name": "CLUSTER_NAME", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]);
    let cases: Vec<Case> = vec![
        (
            "upstream manifest: $(CLUSTER_NAME) from a literal env value kubernetes",
            None,
            daemonset(
                json!(["--cluster-name=$(CLUSTER_NAME)"]),
                env_kubernetes.clone(),
            ),
            Outcome::Warn("default-name"),
            &[
                "args[0]",
                "default cluster name \"kubernetes\"",
                "#3102",
                "Fix: set --cluster-name",
            ],
        ),
        (
            "no flag at all: the CCM's default",
            None,
            daemonset(json!(["--v=2"]), json!([])),
            Outcome::Warn("default-name"),
            &["nothing here sets --cluster-name"],
        ),
        (
            "empty name",
            None,
            daemonset(json!(["--cluster-name="]), json!([])),
            Outcome::Warn("default-name"),
            &["an empty cluster name"],
        ),
        (
            "a unique name, in the space-separated form",
            None,
            daemonset(json!(["--cluster-name", "prod-a"]), json!([])),
            Outcome::Clean,
            &[],
        ),
        (
            "the last setting wins",
            None,
            daemonset(
                json!(["--cluster-name=prod-a", "--cluster-name=kubernetes"]),
                json!([]),
            ),
            Outcome::Warn("default-name"),
            &["args[1]"],
        ),
        (
            "a reference to a Secret is unknown, warned, never guessed",
            None,
            daemonset(
                json!(["--cluster-name=$(CLUSTER_NAME)"]),
                from_secret.clone(),
            ),
            Outcome::Warn("unknown-name"),
            &["cannot check it", "$(VAR)"],
        ),
        (
            "update: the name changes",
            Some(daemonset(json!(["--cluster-name=prod-a"]), json!([]))),
            daemonset(json!(["--cluster-name", "prod-b"]), json!([])),
            Outcome::Deny("renamed"),
            &[
                "from \"prod-a\" to \"prod-b\"",
                "recreates every Service load balancer and changes its IP",
                "kubermatic #5322",
            ],
        ),
        (
            "update: the same name written another way",
            Some(daemonset(json!(["--cluster-name=prod-a"]), json!([]))),
            daemonset(
                json!(["--cluster-name=$(CLUSTER_NAME)"]),
                json!([{"name": "CLUSTER_NAME", "value": "prod-a"}]),
            ),
            Outcome::Clean,
            &[],
        ),
        (
            "update: a default name that stays is not warned again",
            Some(daemonset(json!(["--v=1"]), json!([]))),
            daemonset(json!(["--v=2"]), json!([])),
            Outcome::Clean,
            &[],
        ),
        (
            "update: from the implicit default to a name is a rename",
            Some(daemonset(json!(["--v=1"]), json!([]))),
            daemonset(json!(["--cluster-name=prod-a"]), json!([])),
            Outcome::Deny("renamed"),
            &["from \"kubernetes\" to \"prod-a\""],
        ),
        (
            "HelmRelease without cluster.name: the chart's default",
            None,
            helmrelease(json!({"cloudConfig": {}})),
            Outcome::Warn("default-name"),
            &["HelmRelease kube-system/occm spec.values.cluster.name"],
        ),
        (
            "HelmRelease with a unique cluster.name",
            None,
            helmrelease(json!({"cluster": {"name": "prod-a"}})),
            Outcome::Clean,
            &[],
        ),
        (
            "HelmRelease: controllerExtraArgs override cluster.name",
            None,
            helmrelease(json!({"cluster": {"name": "prod-a"},
                "controllerExtraArgs": "- --cluster-name=kubernetes\n"})),
            Outcome::Warn("default-name"),
            &["spec.values.controllerExtraArgs[0]"],
        ),
        (
            "HelmRelease with valuesFrom: the name may be there, unknown",
            None,
            {
                let mut hr = helmrelease(json!({}));
                hr["spec"]["valuesFrom"] = json!([{"kind": "ConfigMap", "name": "occm-values"}]);
                hr
            },
            Outcome::Warn("unknown-name"),
            &["spec.valuesFrom, which this write does not show"],
        ),
        (
            "HelmRelease update renames cluster.name",
            Some(helmrelease(json!({"cluster": {"name": "prod-a"}}))),
            helmrelease(json!({"cluster": {"name": "prod-b"}})),
            Outcome::Deny("renamed"),
            &["spec.values.cluster.name", "from \"prod-a\" to \"prod-b\""],
        ),
        (
            "Argo CD helm.parameters override the values",
            None,
            application(json!({"valuesObject": {"cluster": {"name": "kubernetes"}},
                "parameters": [{"name": "cluster.name", "value": "prod-a"}]})),
            Outcome::Clean,
            &[],
        ),
        (
            "Argo CD values string with the default",
            None,
            application(json!({"values": "cluster:\n  name: kubernetes\n"})),
            Outcome::Warn("default-name"),
            &["spec.source.helm.values, cluster.name"],
        ),
        (
            "HelmChartConfig that does not set the name: the HelmChart's applies",
            None,
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
                "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
                "spec": {"valuesContent": "nodeSelector: {}\n"}}),
            Outcome::Clean,
            &[],
        ),
        (
            "--controllers from a $(VAR) this write does not define: it may run the service controller",
            None,
            daemonset(
                json!([
                    "--controllers=$(CCM_CONTROLLERS)",
                    "--cluster-name=kubernetes"
                ]),
                json!([]),
            ),
            Outcome::Warn("default-name"),
            &["args[1]", "default cluster name \"kubernetes\""],
        ),
        (
            "HelmRelease: controllerExtraArgs name the cluster with a $(VAR) the kubelet expands",
            None,
            helmrelease(json!({"cluster": {"name": "prod-a"},
                "controllerExtraArgs": "- --cluster-name=$(CLUSTER_NAME)\n"})),
            Outcome::Warn("unknown-name"),
            &["spec.values.controllerExtraArgs[0]", "$(VAR) reference"],
        ),
        (
            "HelmChart without the name: warned, naming what it cannot see",
            None,
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart",
                "metadata": {"name": "openstack-cloud-controller-manager", "namespace": "kube-system"},
                "spec": {"chart": "openstack-cloud-controller-manager", "valuesContent": "{}\n"}}),
            Outcome::Warn("default-name"),
            &["unless a HelmChartConfig of the same name sets cluster.name"],
        ),
    ];
    for (name, old, new, expected, needles) in cases {
        let (got, message) = outcome(&evaluate(old.as_ref(), &new));
        assert_eq!(got, expected, "{name}: {message}");
        for needle in needles {
            assert!(
                message.contains(needle),
                "{name}: {needle:?} not in {message}"
            );
        }
        if expected != Outcome::Clean {
            assert!(
                message.contains("stackgate.dev/exempt.cluster-name"),
                "{name}: {message}"
            );
        }
    }
}

#[test]
fn a_rename_with_a_reason_is_exempted() {
    let old = daemonset(json!(["--cluster-name=prod-a"]), json!([]));
    let mut new = daemonset(json!(["--cluster-name=prod-b"]), json!([]));
    new["metadata"]["annotations"] =
        json!({"stackgate.dev/exempt.cluster-name": "planned migration CHG-42"});
    let verdict = evaluate(Some(&old), &new);
    assert_eq!(outcome(&verdict).0, Outcome::Clean);
    assert_eq!(
        verdict
            .audit_annotations
            .get("cluster-name-exempted")
            .map(String::as_str),
        Some("planned migration CHG-42")
    );
    // An empty reason is no exemption.
    new["metadata"]["annotations"] = json!({"stackgate.dev/exempt.cluster-name": " "});
    assert_eq!(
        outcome(&evaluate(Some(&old), &new)).0,
        Outcome::Deny("renamed")
    );
}

#[test]
fn default_name_deny_parameter_makes_it_a_denial() {
    let mut set = PolicySet::embedded().unwrap();
    let text = include_str!("../policies/cluster-name.yaml")
        .replace("defaultName: warn", "defaultName: deny");
    let custom = PolicySet::from_files(
        vec![
            (
                "cloud-config-sites.yaml".into(),
                include_str!("../policies/cloud-config-sites.yaml").into(),
            ),
            (
                "release-catalog.yaml".into(),
                include_str!("../policies/release-catalog.yaml").into(),
            ),
            ("cluster-name.yaml".into(), text),
        ],
        "test".into(),
    )
    .expect("policy loads");
    set.policies = custom.policies;
    let engine = Engine::new(set);
    let (got, _) = outcome(&evaluate_with(
        &engine,
        None,
        &helmrelease(json!({"cluster": {"name": "kubernetes"}})),
    ));
    assert_eq!(got, Outcome::Deny("default-name"));
}

#[test]
fn check_reports_the_default_name_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("occm.yaml");
    std::fs::write(
        &file,
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: occm\n  namespace: kube-system\nspec:\n  chart:\n    spec:\n      chart: openstack-cloud-controller-manager\n  values:\n    cloudConfig:\n      loadBalancer:\n        provider-requires-serial-api-calls: true\n    cluster:\n      name: kubernetes\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(["check", "--format", "json"])
        .arg(&file)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let finding = v["results"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["policy"] == "cluster-name"))
        .unwrap_or_else(|| panic!("no cluster-name finding: {v}"));
    assert_eq!(finding["level"], "warning", "{finding}");
    assert_eq!(finding["line"], 15, "{finding}");
}

#[test]
fn a_values_file_says_other_values_may_set_the_name() {
    // Cluster Stacks' layout (SovereignCloudStack/cluster-stacks, cluster-addon/ccm): the
    // umbrella chart's values.yaml leaves the name out, and overwrite.yaml (a template the
    // operator renders per cluster) sets it. A values file alone cannot tell.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(
        &file,
        "openstack-cloud-controller-manager:\n  cloudConfig:\n    loadBalancer:\n      provider-requires-serial-api-calls: true\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(["check", "--format", "json", "--values-for"])
        .arg("openstack-cloud-controller-manager=**/values.yaml")
        .arg(dir.path())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{v}");
    let finding = &results[0];
    assert_eq!(finding["policy"], "cluster-name", "{finding}");
    assert_eq!(finding["level"], "warning", "{finding}");
    let message = finding["message"].as_str().unwrap();
    assert!(
        message.contains("nothing here sets --cluster-name")
            && message.contains("unless another values file or --set of the same release sets"),
        "{message}"
    );
}

#[test]
fn only_a_values_file_says_other_values_files_may_set_the_name() {
    // A HelmRelease's values are every values source of its release, so the values-file caveat
    // is not its to carry.
    let (got, message) = outcome(&evaluate(None, &helmrelease(json!({"nodeSelector": {}}))));
    assert_eq!(got, Outcome::Warn("default-name"), "{message}");
    assert!(
        message.contains("nothing here sets --cluster-name"),
        "{message}"
    );
    assert!(!message.contains("another values file"), "{message}");
}

#[test]
fn a_long_name_is_shown_cut_at_100_characters() {
    let long = "a".repeat(150);
    let old = daemonset(json!([format!("--cluster-name={long}")]), json!([]));
    let new = daemonset(json!(["--cluster-name=prod-b"]), json!([]));
    let (got, message) = outcome(&evaluate(Some(&old), &new));
    assert_eq!(got, Outcome::Deny("renamed"), "{message}");
    let shown = format!("\"{}\"…", "a".repeat(100));
    assert!(message.contains(&shown), "{message}");
    assert!(!message.contains(&"a".repeat(101)), "{message}");
}
