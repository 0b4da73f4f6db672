//! The leak matrix (ARCHITECTURE invariant 5, issue 31 item 5): a canary credential through
//! every Secret-fed input `check` reads × every output format it writes. The canary is in
//! values, in key and section names, in a continued (bare-key) line, in a comment, in a
//! `valuesFrom` Secret's `image.tag` and in the CCM arguments of a ClusterResourceSet payload;
//! no output (stdout, or stderr with logs at trace level; text, JSON, SARIF, JUnit) may show
//! it, and each case asserts that its input was read and evaluated, so a case that
//! stops exercising the masking fails instead of passing empty.
//!
//! The same inputs go through the webhook's faces here (each object as the apiserver sends it,
//! to `/validate` and `/mutate` over HTTPS: answers, warnings, audit annotations, logs at trace
//! level, metrics), and through `audit` and the background audit's PolicyReports in
//! `tests/audit.rs` (`a_canary_in_any_secret_input_appears_in_no_audit_face`). `explain` takes
//! only a finding code, so no Secret text can reach it. Every rule's masking over HTTPS is also
//! scanned by `tests/rules_https.rs`, and the guard's clouds.yaml `auth_url` by the table in
//! `src/guard/clouds.rs`.

use std::process::{Command, Output, Stdio};

/// The formats of `check`.
const FORMATS: [&str; 4] = ["text", "json", "sarif", "junit"];

mod common;
#[path = "support/leak_inputs.rs"]
mod leak_inputs;
#[path = "support/review.rs"]
mod review;

use leak_inputs::*;

fn check(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .arg("check")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("STACKGATE_POLICIES")
        .env("STACKGATE_LOG_LEVEL", "trace")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("stackgate runs");
    // Nothing on standard input: closing it ends any read.
    drop(child.stdin.take());
    child.wait_with_output().expect("output")
}

fn all_output(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Every Secret-fed input × every `check` format: the canary never shows, and each input's
/// expected finding does (the input was read and evaluated).
#[test]
fn a_canary_in_any_secret_input_appears_in_no_check_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = inputs();
    for (file, text, expected) in &cases {
        let path = dir.path().join(file);
        std::fs::write(&path, text).expect("write");
        for format in FORMATS {
            let o = check(&["--format", format, path.to_str().expect("UTF-8 path")]);
            let shown = all_output(&o);
            assert!(
                !shown.contains("CANARY"),
                "{format} output of {file} shows the canary:\n{shown}"
            );
            for finding in *expected {
                assert!(shown.contains(finding), "{format} of {file}: {shown}");
            }
        }
    }
}

/// The release a `valuesFrom` Secret's `image.tag` pins is named by the Secret, not by the tag.
#[test]
fn a_secret_image_tag_is_named_by_its_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("values-from.yaml");
    std::fs::write(&path, values_from_secret()).expect("write");
    let o = check(&[path.to_str().expect("UTF-8 path")]);
    let shown = all_output(&o);
    assert!(
        shown.contains("values image.tag <from Secret kube-system/occm-values, not shown>, v1.31"),
        "{shown}"
    );
}

/// The fix shown for a Secret is a masked diff of the decoded config: the context holds the
/// bare key and the unknown section, masked, but the shape is shown; after `--fix` writes it,
/// the report still masks everything.
#[test]
fn a_secret_fix_is_shown_masked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("string-data.yaml");
    std::fs::write(&path, string_data_secret()).expect("write");
    let file = path.to_str().expect("UTF-8 path");
    let o = check(&[file]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(text.contains("values masked"), "{text}");
    assert!(
        text.contains(
            " subnet-id= ***\n floating-network-id =\n ***\n+provider-requires-serial-api-calls=true\n [***]\n ***\n"
        ),
        "{text}"
    );
    let o = check(&["--fix", "--format", "json", file]);
    let report = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!report.contains("CANARY"), "{report}");
    let json: serde_json::Value = serde_json::from_str(&report).expect("JSON report");
    assert_eq!(json["summary"]["fixed"], 1, "{report}");
}

/// Every Secret-fed input × every face of the webhook: each object, as the apiserver sends it
/// (`stringData` merged into base64 `data`), to `/validate` and `/mutate`. No answer (the patch
/// aside: it is the object's own edited data, going back to the apiserver), no log line at
/// trace level and no metric shows the canary, in clear or base64; each input's expected
/// policy is still named by some answer.
#[tokio::test]
async fn a_canary_in_any_secret_input_appears_in_no_webhook_face() {
    use base64::Engine as _;
    common::setup_at("trace");
    let server = common::TestServer::start().await;
    let client = server.client().await;
    let canary_b64 = base64::engine::general_purpose::STANDARD.encode(CANARY);
    let mut uid = 0;
    for (file, text, expected) in inputs() {
        let mut named = String::new();
        for object in leak_inputs::apiserver_objects(&text) {
            for path in ["/validate?timeout=10s", "/mutate?timeout=10s"] {
                uid += 1;
                let review = review::review_for(&object, &format!("leak-{uid}"));
                let body = serde_json::to_vec(&review).expect("encode");
                let (status, out) = common::post(&client, path, body).await;
                assert_eq!(status, http::StatusCode::OK, "{file} {path}: {out}");
                let mut response = out["response"].clone();
                if let Some(r) = response.as_object_mut() {
                    r.remove("patch");
                }
                let shown = response.to_string();
                assert!(!shown.contains("CANARY"), "{file} {path}: {shown}");
                assert!(!shown.contains(&canary_b64), "{file} {path}: {shown}");
                named.push_str(&shown);
            }
        }
        for policy in expected {
            assert!(
                named.contains(policy),
                "{file}: no answer names {policy}: {named}"
            );
        }
    }
    let logs = common::logs();
    assert!(
        logs.contains("TRACE") || logs.contains("DEBUG"),
        "logs were captured"
    );
    assert!(!logs.contains("CANARY"), "a log line shows the canary");
    assert!(!logs.contains(&canary_b64), "a log line shows the canary");
    let metrics = server.metrics().await;
    assert!(!metrics.contains("CANARY"), "{metrics}");
    server.stop().await.expect("stops");
}
