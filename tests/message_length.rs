//! Messages where they are read (issue 27, item 1): every family's documentation example (the
//! inputs `stackgate rules` runs for `docs/rules.md`) is posted to both webhooks as the
//! apiserver would post it, and what `kubectl` would show is measured:
//!
//! - each denial's first line: at most [`FIRST_LINE_MAX`] characters, and it carries the fix
//!   (`Fix:`), so the reader needs nothing else to act;
//! - each warning: whole within kubectl's [`KUBECTL_WARNING_MAX`]-character cut. A warning is
//!   `stackgate POLICY: <first line>`; stackgate cuts a longer one itself (marked `…`), so a
//!   warning that ends in `…` lost its end, often the fix.
//!
//! `measure` prints one row per message (`cargo test --test message_length -- --nocapture`).

#[path = "support/review.rs"]
mod review;

use serde_json::{Value, json};
use stackgate::admission::{Webhook, handle_with};
use stackgate::budget::Cancel;
use stackgate::engine::{Engine, Operation};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::rules::FAMILIES;

/// The longest first line of a denial that `kubectl` users read whole.
const FIRST_LINE_MAX: usize = 200;
/// kubectl (client-go's warning handler) shows warnings of at most this many characters; the
/// apiserver may drop longer ones (k8s.io/apiserver pkg/warning: 256-character limit per
/// warning, applied by admission's warning recorder).
const KUBECTL_WARNING_MAX: usize = 256;

/// One message as kubectl would show it.
#[derive(Debug)]
struct Shown {
    /// The rule family of the finding (an example may raise findings of other families).
    family: &'static str,
    code: String,
    /// `denial` or `warning` (mutate or validate).
    kind: &'static str,
    first_line: String,
    cut: bool,
}

impl Shown {
    fn has_fix(&self) -> bool {
        self.first_line.contains("Fix:")
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let len = self.first_line.chars().count();
        match self.kind {
            "denial" => {
                if len > FIRST_LINE_MAX {
                    out.push(format!("first line {len} > {FIRST_LINE_MAX} chars"));
                }
                if !self.has_fix() {
                    out.push("no `Fix:` in the first line".to_owned());
                }
            }
            _ => {
                if self.cut {
                    out.push(format!(
                        "warning cut at {KUBECTL_WARNING_MAX} chars ({}`Fix:` left)",
                        if self.has_fix() { "" } else { "no " }
                    ));
                }
            }
        }
        out
    }
}

/// The review the apiserver would send for the example (CREATE, or DELETE of the old object).
fn review(object: &Value, operation: Operation) -> Value {
    let mut review = review::review_for(object, "message-length");
    let request = &mut review["request"];
    request["dryRun"] = json!(false);
    if operation == Operation::Delete {
        request["operation"] = json!("DELETE");
        request["oldObject"] = object.clone();
        request["object"] = Value::Null;
        request["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "DeleteOptions"});
    }
    review
}

/// Everything the two webhooks answer for every family's example.
fn measure() -> Vec<Shown> {
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies"));
    let metrics = Metrics::new();
    let mut shown = Vec::new();
    for family in FAMILIES {
        let Some(example) = (family.example)() else {
            continue;
        };
        let body = serde_json::to_vec(&review(&example.object, example.operation)).expect("json");
        for webhook in [Webhook::Mutate, Webhook::Validate] {
            let (reply, verdict) = handle_with(
                &engine,
                webhook,
                &body,
                &metrics,
                &example.facts,
                &Cancel::never(),
            );
            let verdict = verdict.expect("the example is evaluated");
            let answer: Value = serde_json::from_slice(&reply.body).expect("review json");
            let response = &answer["response"];
            if webhook == Webhook::Validate {
                for d in &verdict.denials {
                    shown.push(Shown {
                        family: d.rule.as_str(),
                        code: d.code.to_owned(),
                        kind: "denial",
                        first_line: d.denial_text().lines().next().unwrap_or("").to_owned(),
                        cut: false,
                    });
                }
            }
            // Warnings are in the order of their findings: validate answers the verdict's
            // warnings, mutate its mutation notes and then (for cloud configs) one note on
            // restarting the CCM, which is no finding.
            let findings = match webhook {
                Webhook::Validate => &verdict.warnings,
                Webhook::Mutate => &verdict.mutations,
            };
            for (i, w) in response["warnings"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let text = w.as_str().expect("warning text");
                assert!(text.chars().count() <= KUBECTL_WARNING_MAX, "{text}");
                let finding = findings.get(i);
                shown.push(Shown {
                    family: finding.map_or("(engine)", |f| f.rule.as_str()),
                    code: finding
                        .map_or_else(|| "ccm-restart-note".to_owned(), |f| f.code.to_owned()),
                    kind: match webhook {
                        Webhook::Mutate => "warning (mutate)",
                        Webhook::Validate => "warning (validate)",
                    },
                    first_line: text.to_owned(),
                    cut: text.ends_with('…'),
                });
            }
        }
    }
    shown.sort_by(|a, b| (a.family, &a.code, a.kind).cmp(&(b.family, &b.code, b.kind)));
    shown.dedup_by(|a, b| {
        (a.family, &a.code, a.kind, &a.first_line) == (b.family, &b.code, b.kind, &b.first_line)
    });
    for s in &shown {
        eprintln!(
            "{:<28} {:<24} {:<20} first line {:>4} chars, Fix: {:<3} {}",
            s.family,
            s.code,
            s.kind,
            s.first_line.chars().count(),
            if s.has_fix() { "yes" } else { "no" },
            if s.cut { "CUT" } else { "" }
        );
    }
    shown
}

/// The measurement itself runs: every family with an example is posted, and the examples
/// produce denials and warnings to measure.
#[test]
fn every_example_is_measured() {
    let shown = measure();
    assert!(
        FAMILIES.iter().filter(|f| (f.example)().is_some()).count() >= 8,
        "the families lost their examples"
    );
    assert!(shown.iter().any(|s| s.kind == "denial"));
    assert!(shown.iter().any(|s| s.kind != "denial"));
}

/// The target of issue 27: every denial's first line is short and carries the fix, and no
/// warning is cut.
#[test]
fn first_lines_lead_with_the_fix_and_warnings_fit_kubectl() {
    let problems: Vec<String> = measure()
        .iter()
        .flat_map(|s| {
            s.problems()
                .into_iter()
                .map(move |p| format!("{}/{} {}: {p}", s.family, s.code, s.kind))
        })
        .collect();
    assert!(
        problems.is_empty(),
        "{} messages do not fit:\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Every location form (issue 33): one object per carrier of the delivery registry
// (`src/sites/delivery.rs`) that the webhook reads, each with `provider-requires-serial-api-calls`
// false, so each is denied, and its denial's first line is measured.

/// A realistic long object name.
const LONG_NAME: &str = "openstack-cloud-controller-manager";
/// The namespace realistic objects are in.
const NAMESPACE: &str = "kube-system";

/// The INI every form carries: serial calls off.
const SERIAL_OFF_INI: &str = "[Global]\nregion = RegionOne\n\n[LoadBalancer]\nsubnet-id = \
    9c018814-f2a8-45dd-9679-5400d49b333a\nprovider-requires-serial-api-calls = false\n";

/// The chart values every values form carries: serial calls off.
fn serial_off_values() -> Value {
    json!({"cloudConfig": {"global": {"region": "RegionOne"}, "loadBalancer": {
        "subnet-id": "9c018814-f2a8-45dd-9679-5400d49b333a",
        "provider-requires-serial-api-calls": false}}})
}

/// The same values as a YAML values string (a few lines before, as values files have).
fn serial_off_values_text() -> String {
    "image:\n  tag: v1.31.1\ncloudConfig:\n  global:\n    region: RegionOne\n  loadBalancer:\n    \
     subnet-id: 9c018814-f2a8-45dd-9679-5400d49b333a\n    \
     provider-requires-serial-api-calls: false\n"
        .to_owned()
}

/// `cloudConfigContents` in a values string.
fn serial_off_contents_text() -> String {
    let mut text = String::from("cloudConfigContents: |\n");
    for line in SERIAL_OFF_INI.lines() {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// One object per location form, every object named `name` in namespace `ns` where its kind
/// lets the name be chosen (a cloud-config site is found by its name, so keeps it).
fn location_forms(name: &str, ns: &str) -> Vec<(&'static str, Value)> {
    let meta = json!({"name": name, "namespace": ns});
    let text = serial_off_values_text();
    let contents = serial_off_contents_text();
    let k0s_config = |values: &str| {
        json!({"apiVersion": "k0s.k0sproject.io/v1beta1", "kind": "ClusterConfig",
            "metadata": {"name": "k0s"},
            "spec": {"extensions": {"helm": {"charts": [{
                "chartname": "openstack/openstack-cloud-controller-manager",
                "name": "openstack-ccm", "namespace": "kube-system", "values": values}]}}}})
    };
    let crs_manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         stringData:\n  cloud.conf: |\n{}",
        SERIAL_OFF_INI
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect::<String>()
    );
    vec![
        (
            "Secret site stringData",
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "cloud-config", "namespace": "kube-system"},
                "stringData": {"cloud.conf": SERIAL_OFF_INI}}),
        ),
        (
            "labelled ConfigMap site",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns,
                    "labels": {"stackgate.dev/cloud-config": "cloud.conf"}},
                "data": {"cloud.conf": SERIAL_OFF_INI}}),
        ),
        (
            "labelled values Secret",
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": ns,
                    "labels": {"stackgate.dev/ccm-values": "values.yaml"}},
                "stringData": {"values.yaml": text}}),
        ),
        (
            "ClusterResourceSet payload Secret",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta,
                "type": "addons.cluster.x-k8s.io/resource-set",
                "stringData": {"cloud-config.yaml": crs_manifest}}),
        ),
        (
            "ClusterResourceSet payload ConfigMap",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                "data": {"cloud-config.yaml": crs_manifest}}),
        ),
        (
            "Flux HelmRelease spec.values",
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": meta, "spec": {"chart": {"spec": {
                    "chart": "openstack-cloud-controller-manager", "version": "2.31.1"}},
                    "values": serial_off_values()}}),
        ),
        (
            "Flux HelmRelease spec.values.cloudConfigContents",
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": meta, "spec": {"chart": {"spec": {
                    "chart": "openstack-cloud-controller-manager", "version": "2.31.1"}},
                    "values": {"cloudConfigContents": SERIAL_OFF_INI}}}),
        ),
        (
            "Flux HelmRelease umbrella values",
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": meta, "spec": {"chart": {"spec": {"chart": "openstack-umbrella"}},
                    "values": {"openstack-cloud-controller-manager": serial_off_values()}}}),
        ),
        (
            "Argo CD helm.values",
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": "argocd"},
                "spec": {"source": {"repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                    "chart": "openstack-cloud-controller-manager", "targetRevision": "2.31.1",
                    "helm": {"values": text}}}}),
        ),
        (
            "Argo CD helm.values cloudConfigContents",
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": "argocd"},
                "spec": {"source": {"repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                    "chart": "openstack-cloud-controller-manager", "targetRevision": "2.31.1",
                    "helm": {"values": contents}}}}),
        ),
        (
            "Argo CD helm.valuesObject (multi-source)",
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": "argocd"},
                "spec": {"sources": [
                    {"repoURL": "https://example.com/values.git", "ref": "values"},
                    {"repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                    "chart": "openstack-cloud-controller-manager", "targetRevision": "2.31.1",
                    "helm": {"valuesObject": serial_off_values()}}]}}),
        ),
        (
            "Argo CD helm.parameters",
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": "argocd"},
                "spec": {"source": {"repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                    "chart": "openstack-cloud-controller-manager", "targetRevision": "2.31.1",
                    "helm": {"parameters": [{"name":
                        "cloudConfig.loadBalancer.provider-requires-serial-api-calls",
                        "value": "false"}]}}}}),
        ),
        (
            "HelmChart spec.valuesContent",
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart", "metadata": meta,
                "spec": {"chart": "openstack-cloud-controller-manager", "version": "2.31.1",
                    "valuesContent": text}}),
        ),
        (
            "HelmChart spec.valuesContent cloudConfigContents",
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart", "metadata": meta,
                "spec": {"chart": "openstack-cloud-controller-manager", "version": "2.31.1",
                    "valuesContent": contents}}),
        ),
        (
            "HelmChart spec.set",
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChart", "metadata": meta,
                "spec": {"chart": "openstack-cloud-controller-manager", "version": "2.31.1",
                    "set": {"cloudConfig.loadBalancer.provider-requires-serial-api-calls":
                        "false"}}}),
        ),
        (
            "HelmChartConfig spec.valuesContent",
            json!({"apiVersion": "helm.cattle.io/v1", "kind": "HelmChartConfig",
                "metadata": meta, "spec": {"valuesContent": text}}),
        ),
        ("k0s ClusterConfig", {
            let mut c = k0s_config(&text);
            c["metadata"] = meta.clone();
            c
        }),
        (
            "K0smotronControlPlane spec.k0sConfig",
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta2",
                "kind": "K0smotronControlPlane", "metadata": meta,
                "spec": {"k0sConfig": k0s_config(&text)}}),
        ),
        (
            "K0sControlPlane spec.k0sConfigSpec.k0s",
            json!({"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
                "kind": "K0sControlPlane", "metadata": meta,
                "spec": {"k0sConfigSpec": {"k0s": k0s_config(&text)}}}),
        ),
        (
            "k0smotron Cluster spec.k0sConfig",
            json!({"apiVersion": "k0smotron.io/v1beta1", "kind": "Cluster", "metadata": meta,
                "spec": {"k0sConfig": k0s_config(&text)}}),
        ),
    ]
}

/// Each form's denials through `/validate`: (form, first lines).
fn location_form_denials(name: &str, ns: &str) -> Vec<(&'static str, Vec<String>)> {
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies"));
    let metrics = Metrics::new();
    location_forms(name, ns)
        .into_iter()
        .map(|(form, object)| {
            let body = serde_json::to_vec(&review(&object, Operation::Create)).expect("json");
            let (_, verdict) = handle_with(
                &engine,
                Webhook::Validate,
                &body,
                &metrics,
                &stackgate::engine::Facts::default(),
                &Cancel::never(),
            );
            let verdict = verdict.expect("the object is evaluated");
            let lines = verdict
                .denials
                .iter()
                .map(|d| d.denial_text().lines().next().unwrap_or("").to_owned())
                .collect();
            (form, lines)
        })
        .collect()
}

/// The problems of every form's denials with objects named `name` in `ns`: a form not
/// denied, a first line without `Fix:` or longer than its bound plus `extra` characters.
fn location_form_problems(name: &str, ns: &str, extra: usize) -> Vec<String> {
    let mut problems = Vec::new();
    for (form, lines) in location_form_denials(name, ns) {
        if lines.is_empty() {
            problems.push(format!("{form}: not denied"));
        }
        let bound = FIRST_LINE_MAX + extra;
        for line in lines {
            let len = line.chars().count();
            eprintln!("{form:<48} {len:>4} {line}");
            if len > bound || !line.contains("Fix:") {
                problems.push(format!("{form}: {len} chars (bound {bound}): {line}"));
            }
        }
    }
    problems
}

/// Every location form is denied, and its first line is at most [`FIRST_LINE_MAX`]
/// characters with the fix in it, for realistic long names.
#[test]
fn every_location_form_leads_with_the_fix_within_200_characters() {
    let problems = location_form_problems(LONG_NAME, NAMESPACE, 0);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// With the longest names Kubernetes allows (a 253-character object name, a 63-character
/// namespace), the first line grows by exactly what the names add, once each: nothing else in
/// the location repeats them.
#[test]
fn the_longest_names_add_only_their_own_length() {
    let name = [
        "o".repeat(63),
        "p".repeat(63),
        "e".repeat(63),
        "n".repeat(61),
    ]
    .join(".");
    let ns = "k".repeat(63);
    assert_eq!(name.len(), 253);
    let extra = (name.len() - LONG_NAME.len()) + (ns.len() - NAMESPACE.len());
    let problems = location_form_problems(&name, &ns, extra);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
