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
use stackgate::check::{self, CheckOptions, ItemKind};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
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
            (28, "serial-lb-api-calls", ItemKind::Mutation),
        ]
    );
    let ovn = secret
        .items
        .iter()
        .find(|i| i.line == 25)
        .expect("ovn finding");
    assert!(
        ovn.message.starts_with(
            "Secret default/ccm-demo-crs-1 ClusterResourceSet payload \
             stringData[\"cloud-config-secret.yaml\"] document 1 (Secret \
             kube-system/cloud-config stringData[\"cloud.conf\"]) line 5: [LoadBalancer] \
             lb-provider = ovn"
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
fn the_real_capo_component_with_clusterctl_variables_gives_no_false_finding() {
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
    for o in &file.objects {
        assert!(o.items.is_empty(), "{}: {:?}", o.object, o.items);
    }
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
                .split('\n')
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
    assert_eq!(message.split('\n').count(), 3, "{message}");
    assert!(message.contains(
        "ClusterResourceSet payload data[\"cloud-config-secret.yaml\"] document 1 (Secret \
         kube-system/cloud-config stringData[\"cloud.conf\"]) line 7"
    ));
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
