//! Cluster API ClusterResourceSet payloads: a cloud config embedded as YAML text in a
//! payload Secret (type `addons.cluster.x-k8s.io/resource-set`) or ConfigMap is read by both
//! faces. `stackgate check` points at lines of the file; the webhook (in process and over
//! HTTPS) gives the same verdict and the same patch, which `check --fix` writes; the fixed
//! object passes the webhook without a further patch.

#[path = "support/review.rs"]
mod review;

mod common;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use clap::Parser;
use common::*;
use http::StatusCode;
use serde_json::{Value, json};
use stackgate::admission::{self, Webhook};
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::report::ItemKind;
use stackgate::yaml;

const REPO: &str = "tests/fixtures/capo-crs/repo";
const REAL: &str = "tests/fixtures/capo-crs/real";
const SERIAL: &str = "provider-requires-serial-api-calls = true";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn args(path: &Path, extra: &[&str]) -> CheckOptions {
    let mut argv = vec!["check".to_owned(), path.display().to_string()];
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args)
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn webhook(engine: &Engine, which: Webhook, object: &Value) -> Value {
    let body = review::review_for(object, "crs");
    let reply = admission::handle(
        engine,
        which,
        &serde_json::to_vec(&body).expect("encode"),
        &Metrics::new(),
    );
    assert_eq!(reply.status, 200);
    serde_json::from_slice::<Value>(&reply.body).expect("review")["response"].clone()
}

fn patch_of(response: &Value) -> Value {
    match response["patch"].as_str() {
        Some(b64) => serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64"),
        )
        .expect("JSON Patch"),
        None => json!([]),
    }
}

/// The fixture's CRS Secret as the apiserver hands it to admission: `stringData` merged into
/// base64 `data`.
fn crs_secret_as_admitted() -> Value {
    let text = std::fs::read_to_string(root().join(REPO).join("ccm-crs.yaml")).expect("fixture");
    let mut secret = yaml::parse_stream(&text).expect("parses")[0]
        .root
        .to_json()
        .expect("json");
    let payload = secret["stringData"]["cloud-config-secret.yaml"]
        .as_str()
        .expect("payload")
        .to_owned();
    secret.as_object_mut().expect("object").remove("stringData");
    secret["data"] = json!({
        "cloud-config-secret.yaml": base64::engine::general_purpose::STANDARD.encode(payload)
    });
    secret
}

#[test]
fn check_reports_payload_findings_at_lines_of_the_file() {
    let engine = engine();
    let report = check::check(
        &args(&root().join(REPO), &[]),
        &engine,
        &mut std::io::empty(),
    )
    .expect("check runs");
    let file = &report.files[0];
    assert!(file.problems.is_empty(), "{:?}", file.problems);
    let secret = file
        .objects
        .iter()
        .find(|o| o.object == "Secret default/ccm-demo-crs-1")
        .expect("the CRS Secret");
    let mut seen: Vec<(usize, &str, ItemKind)> = secret
        .items
        .iter()
        .map(|i| (i.line, i.rule.as_str(), i.kind))
        .collect();
    seen.sort_by_key(|(l, r, _)| (*l, *r));
    // The same 3 errors, 2 warnings and 1 fix as the embedded Secret on its own, at the
    // lines of the literal block in the file.
    assert_eq!(
        seen,
        vec![
            (21, "serial-lb-api-calls", ItemKind::Warning),
            (25, "known-bad-lb-settings", ItemKind::Denial),
            (26, "cloud-config-integrity", ItemKind::Warning),
            (26, "known-bad-lb-settings", ItemKind::Denial),
            (27, "cloud-config-integrity", ItemKind::Denial),
            // The line the fix adds after the block is shown at the block's last line.
            (27, "serial-lb-api-calls", ItemKind::Mutation),
        ]
    );
    let ovn = secret
        .items
        .iter()
        .find(|i| i.line == 25)
        .expect("ovn finding");
    assert!(
        ovn.message.starts_with(
            "Secret default/ccm-demo-crs-1 stringData[\"cloud-config-secret.yaml\"]: \
             [LoadBalancer] lb-provider = ovn"
        ) && ovn.message.contains(
            "\nAt ClusterResourceSet payload document 1 (Secret kube-system/cloud-config \
             stringData[\"cloud.conf\"]) line 5.\n"
        ),
        "{}",
        ovn.message
    );
    let configmap = file
        .objects
        .iter()
        .find(|o| o.object == "ConfigMap default/ccm-demo-crs-2")
        .expect("the ConfigMap payload");
    assert!(
        configmap
            .items
            .iter()
            .any(|i| i.line == 50 && i.kind == ItemKind::Warning),
        "{:?}",
        configmap.items
    );
    // The ConfigMap embeds a Secret: its fix is shown decoded and masked, never as base64.
    assert_eq!(configmap.secret_diffs.len(), 1);
    assert!(!configmap.secret_diffs[0].contains("W0dsb2Jh"));
    assert!(!configmap.secret_diffs[0].contains("RegionOne"));
}

#[test]
fn the_real_capo_component_with_clusterctl_variables_says_the_config_is_unseen() {
    // `cloud.conf: ${OPENSTACK_CLOUD_PROVIDER_CONF_B64}`: clusterctl substitutes it, so the
    // config is not in the file. One warning says so (naming the variable); nothing else.
    let engine = engine();
    let report = check::check(
        &args(&root().join(REAL), &[]),
        &engine,
        &mut std::io::empty(),
    )
    .expect("check runs");
    let file = &report.files[0];
    assert!(file.problems.is_empty(), "{:?}", file.problems);
    assert_eq!(file.objects.len(), 3);
    let items: Vec<(&str, ItemKind, &str)> = file
        .objects
        .iter()
        .flat_map(|o| {
            o.items
                .iter()
                .map(|i| (o.object.as_str(), i.kind, i.message.as_str()))
        })
        .collect();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].1, ItemKind::Warning);
    assert!(
        items[0]
            .2
            .contains("the clusterctl variable ${OPENSTACK_CLOUD_PROVIDER_CONF_B64}, which this run cannot see"),
        "{items:?}"
    );
}

#[test]
fn webhook_and_check_agree_and_fix_writes_the_webhook_patch() {
    let engine = engine();
    let report = check::check(
        &args(&root().join(REPO), &[]),
        &engine,
        &mut std::io::empty(),
    )
    .expect("check runs");
    let tmp = tempfile::tempdir().expect("tempdir");
    let fixed_path = tmp.path().join("ccm-crs.yaml");
    std::fs::copy(root().join(REPO).join("ccm-crs.yaml"), &fixed_path).expect("copy");
    let fixed_report = check::check(
        &args(tmp.path(), &["--fix"]),
        &engine,
        &mut std::io::empty(),
    )
    .expect("check --fix runs");
    assert!(fixed_report.files.iter().any(|f| f.written));
    let fixed_text = std::fs::read_to_string(&fixed_path).expect("fixed file");
    let fixed_docs: Vec<Value> = yaml::parse_stream(&fixed_text)
        .expect("the fixed file parses")
        .iter()
        .map(|d| d.root.to_json().expect("json"))
        .collect();
    let mut patched = 0;
    for (i, o) in report.files[0].objects.iter().enumerate() {
        let what = &o.object;
        let v = webhook(&engine, Webhook::Validate, &o.json);
        let cli_denials: Vec<&str> = o
            .items
            .iter()
            .filter(|i| i.kind == ItemKind::Denial)
            .map(|i| i.message.as_str())
            .collect();
        assert_eq!(v["allowed"], cli_denials.is_empty(), "{what}: allowed");
        if !cli_denials.is_empty() {
            let mut webhook_denials: Vec<&str> = v["status"]["message"]
                .as_str()
                .unwrap_or_default()
                .split("\n\n")
                .collect();
            let mut cli_sorted = cli_denials.clone();
            webhook_denials.sort_unstable();
            cli_sorted.sort_unstable();
            assert_eq!(webhook_denials, cli_sorted, "{what}: denial messages");
        }
        let m = webhook(&engine, Webhook::Mutate, &o.json);
        assert_eq!(m["allowed"], true);
        assert_eq!(
            patch_of(&m),
            serde_json::to_value(&o.verdict.patch).expect("patch"),
            "{what}: patch"
        );
        if o.verdict.patch.is_empty() {
            continue;
        }
        patched += 1;
        assert!(o.fixable_in_place, "{what}");
        let mut expected = o.json.clone();
        json_patch::patch(&mut expected, &o.verdict.patch).expect("patch applies");
        assert_eq!(
            fixed_docs[i], expected,
            "{what}: fixed file == mutated object"
        );
        assert!(webhook(&engine, Webhook::Mutate, &expected)["patch"].is_null());
    }
    assert_eq!(patched, 2, "the Secret and the ConfigMap payloads");
    // Only the serial lines were added: everything else in the file is as it was.
    let original = std::fs::read_to_string(root().join(REPO).join("ccm-crs.yaml")).unwrap();
    let added: Vec<&str> = fixed_text
        .lines()
        .filter(|l| !original.lines().any(|o| o == *l))
        .collect();
    assert_eq!(added.len(), 2, "{added:?}");
    assert_eq!(added[0].trim(), SERIAL);
    assert!(added[1].trim_start().starts_with("cloud.conf: "));
}

#[tokio::test]
async fn a_crs_secret_over_https_is_denied_and_patched_in_its_payload() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let secret = crs_secret_as_admitted();
    let body = serde_json::to_vec(&review::review_for(&secret, "crs-https")).expect("encode");

    let (status, v) = post(&client, "/validate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let v = &v["response"];
    assert_eq!(v["allowed"], false);
    let message = v["status"]["message"].as_str().expect("denial message");
    assert_eq!(message.split("\n\n").count(), 3, "{message}");
    assert!(
        message.contains("Secret default/ccm-demo-crs-1 data[\"cloud-config-secret.yaml\"]: ")
            && message.contains(
                "At ClusterResourceSet payload document 1 (Secret kube-system/cloud-config \
                 stringData[\"cloud.conf\"]) line 7"
            ),
        "{message}"
    );
    assert!(!message.contains("keystone.example.test"));

    let (status, m) = post(&client, "/mutate?timeout=10s", body).await;
    assert_eq!(status, StatusCode::OK);
    let m = &m["response"];
    assert_eq!(m["allowed"], true);
    let patch = decoded_patch(m).expect("a patch");
    assert_eq!(patch.as_array().map(Vec::len), Some(1), "{patch}");
    assert_eq!(patch[0]["op"], "replace");
    assert_eq!(patch[0]["path"], "/data/cloud-config-secret.yaml");
    let before = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(secret["data"]["cloud-config-secret.yaml"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    let after = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(patch[0]["value"].as_str().expect("value"))
            .expect("base64"),
    )
    .expect("utf-8");
    // The payload is the same text with one line added inside the embedded cloud.conf.
    let mut expected: Vec<&str> = before.lines().collect();
    let at = expected
        .iter()
        .position(|l| l.contains("monitor-delay"))
        .expect("line");
    let indent = "    ";
    let line = format!("{indent}{SERIAL}");
    expected.insert(at + 1, &line);
    assert_eq!(after.lines().collect::<Vec<_>>(), expected);

    // The patched Secret needs no further patch.
    let mut patched = secret.clone();
    json_patch::patch(
        &mut patched,
        &serde_json::from_value::<json_patch::Patch>(patch).unwrap(),
    )
    .unwrap();
    let body = serde_json::to_vec(&review::review_for(&patched, "crs-again")).unwrap();
    let (_, again) = post(&client, "/mutate?timeout=10s", body).await;
    assert!(again["response"]["patch"].is_null(), "{again}");
}

// --- Object rules on the objects a payload embeds (a CCM DaemonSet, a CCM HelmChart) ---

const OBJECTS: &str = "tests/fixtures/capo-crs/objects";
const RENDERED: &str = "tests/fixtures/capo-crs/rendered";

/// The report's entry for `object` in its first file.
macro_rules! items {
    ($report:expr, $object:expr) => {
        $report.files[0]
            .objects
            .iter()
            .find(|o| o.object == $object)
            .unwrap_or_else(|| panic!("{} in the report", $object))
    };
}

fn line_of_file(dir: &str, file: &str, line: usize) -> String {
    std::fs::read_to_string(root().join(dir).join(file))
        .expect("fixture")
        .lines()
        .nth(line - 1)
        .expect("line")
        .to_owned()
}

/// A payload Secret of the fixture as the apiserver hands it to admission: `stringData`
/// merged into base64 `data`.
fn admitted(object: &Value) -> Value {
    let mut secret = object.clone();
    let Some(string_data) = secret.as_object_mut().expect("object").remove("stringData") else {
        return secret;
    };
    let data: serde_json::Map<String, Value> = string_data
        .as_object()
        .expect("stringData")
        .iter()
        .map(|(k, v)| {
            let text = v.as_str().expect("string");
            (
                k.clone(),
                json!(base64::engine::general_purpose::STANDARD.encode(text)),
            )
        })
        .collect();
    secret["data"] = Value::Object(data);
    secret
}

#[test]
fn check_runs_object_rules_on_ccm_objects_inside_payloads_at_file_lines() {
    let engine = engine();
    let report = check::check(
        &args(&root().join(OBJECTS), &[]),
        &engine,
        &mut std::io::empty(),
    )
    .expect("check runs");
    assert!(report.files[0].problems.is_empty());
    let seen = |object: &str| -> Vec<(usize, String, ItemKind)> {
        items!(&report, object)
            .items
            .iter()
            .map(|i| (i.line, i.rule.clone(), i.kind))
            .collect()
    };

    // --concurrent-service-syncs=4 on the embedded CCM DaemonSet: the concurrency warning (its
    // default mode is warn) at the line of that argument in the file.
    let concurrency = items!(&report, "Secret default/ccm-concurrency-crs");
    // The trimmed DaemonSet mounts nothing at its --cloud-config: `ccm-config-source` says
    // the config is unseen, at the container.
    assert_eq!(
        seen("Secret default/ccm-concurrency-crs"),
        vec![
            (34, "ccm-config-source".to_owned(), ItemKind::Warning),
            (42, "ccm-concurrency".to_owned(), ItemKind::Warning)
        ]
    );
    assert_eq!(
        line_of_file(OBJECTS, "ccm-objects.yaml", 42).trim(),
        "- --concurrent-service-syncs=4"
    );
    assert!(
        concurrency.items[1].message.starts_with(
            "Secret default/ccm-concurrency-crs ClusterResourceSet payload \
             stringData[\"ccm.yaml\"] document 2 line 31: DaemonSet \
             kube-system/openstack-cloud-controller-manager container \
             \"openstack-cloud-controller-manager\" args[5]: --concurrent-service-syncs=4 lets"
        ),
        "{}",
        concurrency.items[1].message
    );

    // The upstream `--cluster-name=$(CLUSTER_NAME)` with CLUSTER_NAME=kubernetes: the
    // cluster-name warning at the line of the argument.
    let default_name = items!(&report, "Secret default/ccm-default-name-crs");
    assert_eq!(
        seen("Secret default/ccm-default-name-crs"),
        vec![
            (69, "ccm-config-source".to_owned(), ItemKind::Warning),
            (73, "cluster-name".to_owned(), ItemKind::Warning)
        ]
    );
    assert_eq!(
        line_of_file(OBJECTS, "ccm-objects.yaml", 73).trim(),
        "- --cluster-name=$(CLUSTER_NAME)"
    );
    assert!(
        default_name.items[1].message.contains(
            "document 1 line 20: DaemonSet kube-system/openstack-cloud-controller-manager"
        ) && default_name.items[1]
            .message
            .contains("the default cluster name \"kubernetes\""),
        "{}",
        default_name.items[1].message
    );

    // A DaemonSet that is not the CCM, in a payload that is read: nothing.
    assert_eq!(seen("ConfigMap default/csi-crs"), vec![]);

    // Exemptions: on the payload Secret, and on the embedded object itself.
    for exempt in [
        "Secret default/ccm-exempt-crs",
        "Secret default/ccm-inner-exempt-crs",
    ] {
        let o = items!(&report, exempt);
        // The trimmed DaemonSets pass no --cloud-config (`ccm-config-source`, not exempted).
        assert_eq!(
            o.items
                .iter()
                .filter(|i| i.policy != "ccm-config-source")
                .map(|i| i.kind)
                .collect::<Vec<_>>(),
            vec![ItemKind::Exemption],
            "{exempt}: {:?}",
            o.items
        );
        assert_eq!(o.verdict.exemptions[0].policy, "ccm-concurrency");
    }

    // The CCM chart in an embedded RKE2 HelmChart: its controllerExtraArgs and its default
    // cluster.name, named with the inner object.
    let chart = items!(&report, "Secret default/ccm-helmchart-crs");
    let mut rules: Vec<&str> = chart.items.iter().map(|i| i.rule.as_str()).collect();
    rules.sort_unstable();
    assert_eq!(rules, ["ccm-concurrency", "cluster-name"]);
    assert!(chart.items.iter().all(|i| {
        i.kind == ItemKind::Warning
            && i.message
                .contains("HelmChart kube-system/openstack-cloud-controller-manager")
    }));

    // Object rules never patch a payload.
    for o in &report.files[0].objects {
        assert!(o.verdict.patch.is_empty(), "{}", o.object);
        assert!(o.verdict.mutations.is_empty(), "{}", o.object);
    }
}

#[test]
fn the_real_capo_ccm_payload_as_clusterctl_renders_it_warns_about_the_default_cluster_name() {
    // `ccm.yaml` of the CAPO component with `data: ${CCM_RESOURCES}` replaced as Cluster API's
    // e2e framework does, with cloud-provider-openstack's own CCM DaemonSet manifest: its
    // `--cluster-name=$(CLUSTER_NAME)` expands to the shared default "kubernetes".
    let engine = engine();
    let report = check::check(
        &args(&root().join(RENDERED), &[]),
        &engine,
        &mut std::io::empty(),
    )
    .expect("check runs");
    assert!(report.files[0].problems.is_empty());
    let mut all: Vec<(String, usize, String, ItemKind)> = Vec::new();
    for o in &report.files[0].objects {
        for i in &o.items {
            all.push((o.object.clone(), i.line, i.rule.clone(), i.kind));
        }
    }
    // The Secret's `cloud.conf` is still the clusterctl variable: said to be unseen.
    assert!(
        all.iter().any(|(o, _, r, k)| o == "Secret ccm-demo-crs-1"
            && r == "cloud-config-integrity"
            && *k == ItemKind::Warning),
        "{all:?}"
    );
    all.retain(|(o, ..)| o != "Secret ccm-demo-crs-1");
    assert_eq!(
        all,
        vec![(
            "ConfigMap ccm-demo-crs-1".to_owned(),
            60,
            "cluster-name".to_owned(),
            ItemKind::Warning
        )]
    );
    assert_eq!(
        line_of_file(RENDERED, "ccm.yaml", 60).trim(),
        "- --cluster-name=$(CLUSTER_NAME)"
    );
    let message = &items!(&report, "ConfigMap ccm-demo-crs-1").items[0].message;
    assert!(
        message.starts_with(
            "ConfigMap ccm-demo-crs-1 ClusterResourceSet payload data[\"resources\"] document 2 \
             line 54: DaemonSet kube-system/openstack-cloud-controller-manager"
        ),
        "{message}"
    );
}

#[test]
fn webhook_and_check_agree_on_object_findings_in_payloads() {
    let engine = engine();
    let mut compared = 0;
    for dir in [OBJECTS, RENDERED] {
        let report = check::check(
            &args(&root().join(dir), &[]),
            &engine,
            &mut std::io::empty(),
        )
        .expect("check runs");
        for o in &report.files[0].objects {
            let what = &o.object;
            let cli: Vec<&str> = o
                .items
                .iter()
                .filter(|i| i.kind == ItemKind::Warning)
                .map(|i| i.message.as_str())
                .collect();
            // As written (`stringData`), and as the apiserver admits it (base64 `data`): the
            // payload text, and so every line, is the same; only the field's name differs.
            for (json, field) in [
                (o.json.clone(), "stringData["),
                (admitted(&o.json), "data["),
            ] {
                let mut expected: Vec<String> = cli
                    .iter()
                    .map(|m| {
                        m.replace(
                            "ClusterResourceSet payload stringData[",
                            &format!("ClusterResourceSet payload {field}"),
                        )
                    })
                    .collect();
                expected.sort();
                let v = webhook(&engine, Webhook::Validate, &json);
                assert_eq!(v["allowed"], true, "{what}");
                let mut shown: Vec<&str> = v["warnings"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                shown.sort_unstable();
                assert_eq!(shown.len(), expected.len(), "{what}: {shown:?}");
                // kubectl's rendering: `stackgate <policy>: ` and the message, cut.
                for w in &shown {
                    let body = w
                        .split_once(": ")
                        .map(|(_, b)| b.trim_end_matches('…'))
                        .expect("policy prefix");
                    assert!(
                        expected.iter().any(|m| m.starts_with(body)),
                        "{what}: {w} not among {expected:?}"
                    );
                }
                // No patch from an object rule, on either webhook.
                let m = webhook(&engine, Webhook::Mutate, &json);
                assert_eq!(m["allowed"], true);
                assert!(m["patch"].is_null(), "{what}: {m}");
                compared += 1;
            }
            assert!(o.verdict.patch.is_empty(), "{what}");
        }
    }
    assert_eq!(compared, 2 * 9);
}

/// The fixture's object named `name` (a payload Secret), as JSON.
fn fixture_object(dir: &str, file: &str, name: &str) -> Value {
    let text = std::fs::read_to_string(root().join(dir).join(file)).expect("fixture");
    yaml::parse_stream(&text)
        .expect("parses")
        .iter()
        .map(|d| d.root.to_json().expect("json"))
        .find(|o| o["metadata"]["name"] == name)
        .expect("object in the fixture")
}

#[tokio::test]
async fn an_embedded_ccm_daemonset_over_https_gets_the_concurrency_warning_and_no_patch() {
    let server = TestServer::start().await;
    let client = server.client().await;
    let secret = admitted(&fixture_object(
        OBJECTS,
        "ccm-objects.yaml",
        "ccm-concurrency-crs",
    ));
    let body = serde_json::to_vec(&review::review_for(&secret, "crs-objects")).expect("encode");

    let (status, v) = post(&client, "/validate?timeout=10s", body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    let v = &v["response"];
    assert_eq!(v["allowed"], true, "{v}");
    let warnings = v["warnings"].as_array().expect("warnings");
    // The concurrency warning, and the trimmed DaemonSet's unseen config (no mount at its
    // --cloud-config).
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[1]
            .as_str()
            .is_some_and(|w| w.starts_with("stackgate ccm-config-source:")),
        "{warnings:?}"
    );
    let warning = warnings[0].as_str().expect("text");
    assert!(
        warning.starts_with(
            "stackgate ccm-concurrency: Secret default/ccm-concurrency-crs ClusterResourceSet \
             payload data[\"ccm.yaml\"] document 2 line 31: DaemonSet \
             kube-system/openstack-cloud-controller-manager container"
        ),
        "{warning}"
    );

    let (status, m) = post(&client, "/mutate?timeout=10s", body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(m["response"]["allowed"], true);
    assert!(decoded_patch(&m["response"]).is_none(), "{m}");
}

#[test]
fn an_update_of_a_payload_is_judged_as_the_creation_of_its_objects() {
    // The ClusterResourceSet's strategy (ApplyOnce by default) decides whether existing
    // clusters ever see a changed payload, and it is not in the payload: a changed cluster
    // name in the payload is not called a rename; the objects are judged as new ones.
    let engine = engine();
    let with_name = |name: &str| {
        let mut secret = fixture_object(OBJECTS, "ccm-objects.yaml", "ccm-concurrency-crs");
        let payload = secret["stringData"]["ccm.yaml"]
            .as_str()
            .expect("payload")
            .replace("--cluster-name=prod-a", &format!("--cluster-name={name}"))
            .replace(
                "--concurrent-service-syncs=4",
                "--concurrent-service-syncs=1",
            );
        secret["stringData"]["ccm.yaml"] = json!(payload);
        serde_json::from_value::<kube::core::DynamicObject>(secret).expect("object")
    };
    let gvk = kube::core::GroupVersionKind::gvk("", "v1", "Secret");
    let (old, renamed, default) = (
        with_name("prod-a"),
        with_name("prod-b"),
        with_name("kubernetes"),
    );
    let update = |new: &kube::core::DynamicObject| {
        let mut subject = stackgate::engine::Subject::create(&gvk, new);
        subject.operation = stackgate::engine::Operation::Update;
        subject.old_object = Some(&old);
        subject.dry_run = false;
        engine.evaluate(&subject)
    };
    // The trimmed DaemonSet's unseen config (`ccm-config-source`) is said on every write; the
    // rest is about the names.
    let about_names = |verdict: &stackgate::engine::Verdict| -> Vec<&'static str> {
        verdict
            .warnings
            .iter()
            .filter(|w| w.policy != "ccm-config-source")
            .map(|w| w.code)
            .collect()
    };
    let verdict = update(&renamed);
    assert!(
        verdict.denials.is_empty() && about_names(&verdict).is_empty(),
        "{verdict:?}"
    );
    let verdict = update(&default);
    assert!(verdict.denials.is_empty(), "{verdict:?}");
    assert_eq!(about_names(&verdict), vec!["default-name"], "{verdict:?}");
    assert!(verdict.patch.is_empty());
}
