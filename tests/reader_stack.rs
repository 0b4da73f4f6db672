//! Every reader of tenant input on a small thread stack (issue 22, "Build"): deep YAML (block,
//! flow, aliases), deep JSON, `--set`-style `[0]` chains, deep ClusterResourceSet payloads and
//! labelled values, through the public entry points the webhook and `check` use.
//!
//! Each case runs on a thread with [`STACK`] bytes of stack, half of what a tokio worker or
//! blocking thread has in `serve` (2 MiB), in the debug build (larger frames than release).
//! A reader that recurses once per level without a cap overflows it on these inputs and
//! aborts this test binary: a missing cap shows up here, not in production. The inputs at a
//! cap also run here, so a cap set too high for the stack shows up too.

use serde_json::{Value, json};
use stackgate::admission::{MAX_JSON_DEPTH, Webhook, handle};
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::yaml::edit::{self as yamledit, Change};
use stackgate::yaml::{self, Limit, MAX_DEPTH, Seg};

/// Stack of the threads the readers run on.
const STACK: usize = 1024 * 1024;

/// Levels of the deep inputs: far past every cap, so an uncapped recursion overflows.
const DEEP: usize = 100_000;

/// Runs `f` on a thread with [`STACK`] bytes of stack.
fn on_small_stack<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .name(name.to_owned())
        .stack_size(STACK)
        .spawn(f)
        .expect("spawn")
        .join()
        .unwrap_or_else(|_| panic!("{name} panicked"))
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn review(group: &str, version: &str, kind: &str, resource: &str, object: &str) -> Vec<u8> {
    let envelope = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "reader-stack",
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "name": "deep", "namespace": "kube-system", "operation": "CREATE",
            "userInfo": {"username": "tenant"},
            "object": "@@OBJECT@@", "oldObject": null, "dryRun": true,
        }
    })
    .to_string();
    envelope.replacen("\"@@OBJECT@@\"", object, 1).into_bytes()
}

/// `/validate` of `body` on a small stack: the answer's `response` and the metrics text.
fn validate(name: &str, body: Vec<u8>) -> (Value, String) {
    on_small_stack(name, move || {
        let metrics = Metrics::new();
        let reply = handle(&engine(), Webhook::Validate, &body, &metrics);
        let answer: Value = serde_json::from_slice(&reply.body).expect("a JSON answer");
        (answer["response"].clone(), metrics.encode())
    })
}

/// Everything an answer says: status message and warnings.
fn texts(response: &Value) -> String {
    let mut out = response["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for w in response["warnings"].as_array().into_iter().flatten() {
        out.push('\n');
        out.push_str(w.as_str().unwrap_or_default());
    }
    out
}

/// A JSON string literal of `text`.
fn string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

// ---------------------------------------------------------------------------------------
// YAML

/// `levels` nested flow sequences.
fn flow_seqs(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

/// `levels` nested flow mappings `{a: {a: … 1}}`.
fn flow_maps(levels: usize) -> String {
    format!("{}1{}", "{a: ".repeat(levels), "}".repeat(levels))
}

/// `levels` nested block sequences on one line (`- - - x`).
fn block_seqs(levels: usize) -> String {
    format!("{}x\n", "- ".repeat(levels))
}

/// Flow levels per anchor in [`alias_chain`]: well within what the parser itself nests.
const LINK: usize = 200;

/// A document whose `top` is an alias standing for `containers` nested sequences around the
/// scalar `x`, built from anchors of at most [`LINK`] levels each (so the parser's own
/// nesting limit is never what stops it, and the aliases stand for few nodes). With the root
/// mapping and the scalar, the document nests `containers + 2` levels, aliases expanded.
fn alias_chain(containers: usize) -> String {
    let mut text = String::new();
    let mut left = containers;
    let mut inner = "x".to_owned();
    let mut i = 0;
    while left > 0 {
        let step = match left % LINK {
            0 => LINK,
            r if i == 0 => r,
            _ => LINK,
        };
        text.push_str(&format!(
            "a{i}: &a{i} {}{inner}{}\n",
            "[".repeat(step),
            "]".repeat(step)
        ));
        inner = format!("*a{i}");
        left -= step;
        i += 1;
    }
    text.push_str(&format!("top: {inner}\n"));
    text
}

#[test]
fn deep_yaml_is_refused_by_a_cap_not_the_stack() {
    for (shape, text) in [
        ("flow sequences", flow_seqs(DEEP)),
        ("flow mappings", flow_maps(DEEP)),
        ("block sequences", block_seqs(DEEP)),
        ("aliases", alias_chain(2 * MAX_DEPTH)),
    ] {
        let error = on_small_stack(shape, move || {
            let parsed = yaml::parse_stream(&text);
            // The editor reads the text the same way before it edits anything.
            let edited = yamledit::apply(
                &text,
                0,
                &Change::Set {
                    path: vec![Seg::key("z")],
                    value: json!(1),
                },
            );
            assert!(edited.is_err(), "{shape}: edited");
            parsed.expect_err(shape)
        });
        // Stackgate's depth cap, however the text nests (the parser's own nesting limits
        // are the cap), and where.
        assert!(error.line >= 1, "{shape}: {error}");
        assert_eq!(error.limit, Some(Limit::Depth), "{shape}: {error}");
        assert!(
            error.message.contains(&format!("{MAX_DEPTH} levels")),
            "{shape}: {error}"
        );
    }
}

#[test]
fn yaml_at_the_depth_cap_converts_and_edits_on_a_small_stack() {
    // The root mapping, the chain and its scalar: exactly MAX_DEPTH levels.
    let at_limit = alias_chain(MAX_DEPTH - 2);
    let past = alias_chain(MAX_DEPTH - 1);
    let (json, edited, error) = on_small_stack("yaml at the cap", move || {
        let docs = yaml::parse_stream(&at_limit).expect("at the cap");
        let json = docs[0].root.to_json().expect("converts");
        let edited = yamledit::apply(
            &at_limit,
            0,
            &Change::Set {
                path: vec![Seg::key("z")],
                value: json!({"deep": [1]}),
            },
        )
        .expect("edits");
        let error = yaml::parse_stream(&past).expect_err("one level past the cap");
        (json, edited, error)
    });
    let mut depth = 1;
    let mut v = &json["top"];
    while let Some(inner) = v.get(0) {
        depth += 1;
        v = inner;
    }
    // The chain's MAX_DEPTH - 2 arrays, then its scalar.
    assert_eq!((depth, v.clone()), (MAX_DEPTH - 1, json!("x")));
    assert!(edited.contains("\nz:"), "{edited}");
    assert_eq!(error.limit, Some(Limit::Depth), "{error}");
}

// ---------------------------------------------------------------------------------------
// JSON

/// A Deployment whose `spec` nests `levels - 1` arrays (`levels` containers with its braces).
fn deployment(levels: usize) -> Vec<u8> {
    let object = format!(
        r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"deep","namespace":"kube-system"}},"spec":{}}}"#,
        flow_seqs(levels - 1)
    );
    review("apps", "v1", "Deployment", "deployments", &object)
}

#[test]
fn deep_json_is_refused_over_stackgates_limit() {
    let (response, metrics) = validate("deep JSON", deployment(DEEP));
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 413, "{response}");
    let text = texts(&response);
    assert!(
        text.contains(&format!("deeper than {MAX_JSON_DEPTH} levels"))
            && text.contains("over stackgate's limit"),
        "{text}"
    );
    assert!(
        metrics.contains("stackgate_input_limits_total{limit=\"json_depth\"} 1"),
        "{metrics}"
    );
}

#[test]
fn json_at_the_depth_cap_is_evaluated_and_one_past_is_refused() {
    let (response, metrics) = validate("JSON at the cap", deployment(MAX_JSON_DEPTH));
    assert_eq!(response["allowed"], true, "{response}");
    assert!(!metrics.contains("json_depth"), "{metrics}");
    let (response, _) = validate("JSON past the cap", deployment(MAX_JSON_DEPTH + 1));
    assert_eq!(response["status"]["code"], 413, "{response}");
}

/// A Flux HelmRelease of the CCM chart whose values hold `cloudConfig.global.deep` nested as
/// deep as the JSON cap allows: merged, rendered to INI (Go's `%v` of a nested value) and
/// located, every walk on a value at the cap.
#[test]
fn ccm_values_at_the_json_cap_render_on_a_small_stack() {
    // Review braces are not counted (the object is decoded on its own): the object, spec,
    // values, cloudConfig, global, then the arrays.
    let object = format!(
        r#"{{"apiVersion":"helm.toolkit.fluxcd.io/v2","kind":"HelmRelease","metadata":{{"name":"occm","namespace":"kube-system"}},"spec":{{"chart":{{"spec":{{"chart":"openstack-cloud-controller-manager","sourceRef":{{"kind":"HelmRepository","name":"cpo"}}}}}},"values":{{"cloudConfig":{{"global":{{"deep":{}}}}}}}}}}}"#,
        flow_seqs(MAX_JSON_DEPTH - 5)
    );
    let body = review(
        "helm.toolkit.fluxcd.io",
        "v2",
        "HelmRelease",
        "helmreleases",
        &object,
    );
    let (response, _) = validate("values at the JSON cap", body);
    // Read and evaluated: an answer about the config, not a decoding refusal.
    assert_ne!(response["status"]["code"], 413, "{response}");
    assert!(response.get("allowed").is_some(), "{response}");
}

// ---------------------------------------------------------------------------------------
// Helm values strings and payloads

/// An RKE2 HelmChart of the CCM chart with `valuesContent` `values`.
fn helmchart(values: &str) -> Vec<u8> {
    let object = format!(
        r#"{{"apiVersion":"helm.cattle.io/v1","kind":"HelmChart","metadata":{{"name":"openstack-cloud-controller-manager","namespace":"kube-system"}},"spec":{{"chart":"openstack-cloud-controller-manager","targetNamespace":"kube-system","valuesContent":{}}}}}"#,
        string(values)
    );
    review("helm.cattle.io", "v1", "HelmChart", "helmcharts", &object)
}

/// A ConfigMap holding the CCM chart's values where they are written
/// (`stackgate.dev/ccm-values=values.yaml`).
fn labelled_values(values: &str) -> Vec<u8> {
    let object = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"occm-values","namespace":"kube-system","labels":{{"stackgate.dev/ccm-values":"values.yaml"}}}},"data":{{"values.yaml":{}}}}}"#,
        string(values)
    );
    review("", "v1", "ConfigMap", "configmaps", &object)
}

/// A ClusterResourceSet payload Secret whose value embeds the cloud-config Secret after
/// `extra` (a YAML document).
fn crs_payload(extra: &str) -> Vec<u8> {
    let payload = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud-config\n  namespace: kube-system\n\
         stringData:\n  cloud.conf: \"[Global]\\n\"\n---\n{extra}"
    );
    let object = format!(
        r#"{{"apiVersion":"v1","kind":"Secret","type":"addons.cluster.x-k8s.io/resource-set","metadata":{{"name":"crs","namespace":"default"}},"stringData":{{"payload.yaml":{}}}}}"#,
        string(&payload)
    );
    review("", "v1", "Secret", "secrets", &object)
}

#[test]
fn deep_values_strings_and_payloads_are_refused_by_the_yaml_caps() {
    for (carrier, body) in [
        ("HelmChart valuesContent, flow", helmchart(&flow_seqs(DEEP))),
        (
            "HelmChart valuesContent, block",
            helmchart(&block_seqs(DEEP)),
        ),
        (
            "HelmChart valuesContent, aliases",
            helmchart(&alias_chain(2 * MAX_DEPTH)),
        ),
        ("labelled values", labelled_values(&flow_maps(DEEP))),
        ("CRS payload", crs_payload(&flow_seqs(DEEP))),
    ] {
        let (response, _) = validate(carrier, body);
        // Answered (no crash); a YAML text stackgate cannot read is never admitted as
        // checked: validate denies it or says why it could not look.
        assert!(response.get("allowed").is_some(), "{carrier}: {response}");
        assert!(!texts(&response).is_empty(), "{carrier}: {response}");
    }
}

/// Issue 31 item 6: a short values string nested past 255 flow levels was refused as "not
/// valid YAML" (the parser's own limit), uncounted; Helm (go-yaml v2, 10 000 levels) reads it.
/// Up to the cap it is read; past it, the answer says it is over stackgate's limit and the
/// `yaml_depth` limit is counted.
#[test]
fn flow_nesting_past_255_levels_is_read_and_past_the_cap_is_stackgates_limit() {
    // The root, cloudConfig, global and `deep` take three levels before the flow ones.
    for (levels, over) in [(256, false), (MAX_DEPTH - 3, false), (MAX_DEPTH - 2, true)] {
        let values = format!(
            "cloudConfig:\n  global:\n    deep: {}1{}\n",
            "{a: ".repeat(levels - 1),
            "}".repeat(levels - 1)
        );
        let (response, metrics) = validate("deep flow values", helmchart(&values));
        let text = texts(&response);
        let counted = metrics.contains("stackgate_input_limits_total{limit=\"yaml_depth\"} 1");
        assert_eq!(counted, over, "{levels} levels: {metrics}");
        assert!(!text.contains("not valid YAML"), "{levels} levels: {text}");
        if over {
            assert!(
                text.contains("over stackgate's YAML limits")
                    && text.contains(&format!("deeper than {MAX_DEPTH} levels")),
                "{levels} levels: {text}"
            );
        }
    }
}

#[test]
fn ccm_values_at_the_yaml_cap_render_on_a_small_stack() {
    // `cloudConfig.global.deep` stands for a chain of sequences that brings the document to
    // the YAML cap; the chart renders it with Go's `%v`, recursively.
    // Root, cloudConfig, global, the chain, the scalar: MAX_DEPTH levels.
    let chain = alias_chain(MAX_DEPTH - 4);
    let (anchors, top) = chain.rsplit_once("top: ").expect("a top alias");
    let values = format!("{anchors}cloudConfig:\n  global:\n    deep: {top}");
    let (response, _) = validate("valuesContent at the YAML cap", helmchart(&values));
    assert!(response.get("allowed").is_some(), "{response}");
    assert!(
        !texts(&response).contains("levels (the YAML depth cap)"),
        "{response}"
    );
}

// ---------------------------------------------------------------------------------------
// Helm `--set` paths (strvals): the `[0]` chains of issue 22 item 1.

/// `cloudConfig.x` then `[0]` `n` times (~30 KB for 7,500).
fn index_chain(n: usize) -> String {
    format!("cloudConfig.x{}", "[0]".repeat(n))
}

#[test]
fn argo_parameter_index_chains_are_refused_by_a_cap() {
    let object = format!(
        r#"{{"apiVersion":"argoproj.io/v1alpha1","kind":"Application","metadata":{{"name":"occm","namespace":"argocd"}},"spec":{{"project":"default","destination":{{"namespace":"kube-system","server":"https://kubernetes.default.svc"}},"source":{{"chart":"openstack-cloud-controller-manager","repoURL":"https://kubernetes.github.io/cloud-provider-openstack","targetRevision":"2.31.1","helm":{{"parameters":[{{"name":{},"value":"1"}}]}}}}}}}}"#,
        string(&index_chain(7_500))
    );
    let body = review(
        "argoproj.io",
        "v1alpha1",
        "Application",
        "applications",
        &object,
    );
    let (response, _) = validate("Argo parameter [0] chain", body);
    assert!(
        texts(&response).contains("over stackgate's limit"),
        "{response}"
    );
}

#[test]
fn helmchart_set_index_chains_are_refused_by_a_cap() {
    let object = format!(
        r#"{{"apiVersion":"helm.cattle.io/v1","kind":"HelmChart","metadata":{{"name":"openstack-cloud-controller-manager","namespace":"kube-system"}},"spec":{{"chart":"openstack-cloud-controller-manager","targetNamespace":"kube-system","set":{{{}:"1"}}}}}}"#,
        string(&index_chain(7_500))
    );
    let body = review("helm.cattle.io", "v1", "HelmChart", "helmcharts", &object);
    let (response, _) = validate("HelmChart spec.set [0] chain", body);
    assert!(
        texts(&response).contains("over stackgate's limit"),
        "{response}"
    );
}

// ---------------------------------------------------------------------------------------
// `stackgate check` (files): the same readers from the CLI's side.

#[test]
fn check_reads_deep_files_without_overflowing() {
    use clap::Parser;
    use stackgate::check::{self, CheckOptions};
    use stackgate::cli::CheckArgs;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: CheckArgs,
    }
    for (shape, text) in [
        ("flow", flow_seqs(DEEP)),
        ("block", block_seqs(DEEP)),
        ("aliases", alias_chain(2 * MAX_DEPTH)),
    ] {
        let report = on_small_stack(shape, move || {
            let options = CheckOptions::from(
                &Cmd::try_parse_from(["check", "-"])
                    .expect("valid flags")
                    .args,
            );
            check::check(&options, &engine(), &mut text.as_bytes()).expect("check runs")
        });
        // The file is reported as unreadable (exit code 2 or 1), not crashed on.
        assert_ne!(report.exit_code(), 0, "{shape}");
    }
}
