//! `StackgateException` objects in `stackgate check` (issue 37): `--exceptions PATH` and
//! `--now`. A finding an active exception covers is reported as excepted, naming the
//! exception, its reason, ticket and expiry, and does not fail the run; an expired one is
//! reported as not applied and the policy applies; inside the warning window the excepted
//! finding is a warning; a refused exception is an input error (exit code 2), never "exempt
//! everything". Over HTTPS, `serve`'s exception source (a cell the watcher fills; here the
//! test fills it) turns a denial into an admission until the exception expires, at the
//! review's own instant, with a warning inside the window.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::*;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use stackgate::engine::Engine;
use stackgate::exceptions_watch::{ExceptionCell, ExceptionSource};
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::policy::exception::{Exception, ExceptionRules, ExceptionSet};
use stackgate::server::AppState;

/// An RKE2 HelmChart whose values set `provider-requires-serial-api-calls: "false"`: a denial
/// of policy serial-lb-api-calls, code `false`.
const DENIED: &str = "tests/fixtures/gitops/repo/rke2/occm-helmchart.yaml";

/// Before the warning window of the exception below (expires 2026-12-31, 14 days' window).
const EARLY: &str = "2026-11-28T12:00:00Z";

fn exception(namespace: &str, spec_match: &str, codes: &str) -> String {
    format!(
        "apiVersion: stackgate.dev/v1alpha1
kind: StackgateException
metadata:
  name: occm-serial
  namespace: {namespace}
spec:
  policy: serial-lb-api-calls
  codes: {codes}
  match:
{spec_match}
  reason: Octavia provider fixed upstream
  ticket: CHG-42
  expires: \"2026-12-31T00:00:00Z\"
"
    )
}

const MATCH_IT: &str = "    kinds: [HelmChart]
    namespaces: [kube-system]
    names: [openstack-cloud-controller-manager]";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write exception");
    path
}

fn stackgate(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .env("STACKGATE_LOG_LEVEL", "off")
        .output()
        .expect("run stackgate");
    (
        out.status.code(),
        String::from_utf8(out.stdout).expect("utf-8"),
        String::from_utf8(out.stderr).expect("utf-8"),
    )
}

/// `check --format json DENIED --exceptions PATH --now NOW extra…`: exit code and report.
fn check(exceptions: &Path, now: &str, extra: &[&str]) -> (Option<i32>, Value) {
    let path = exceptions.to_str().expect("utf-8 path");
    let mut args = vec![
        "check",
        "--format",
        "json",
        DENIED,
        "--exceptions",
        path,
        "--now",
        now,
    ];
    args.extend_from_slice(extra);
    let (status, stdout, stderr) = stackgate(&args);
    let report = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("JSON report: {e}\n{stdout}\n{stderr}"));
    (status, report)
}

/// `(kind, level, code, message)` of every result.
fn results(report: &Value) -> Vec<(String, String, String, String)> {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (s("kind"), s("level"), s("code"), s("message"))
        })
        .collect()
}

#[test]
fn an_active_exception_reports_the_finding_as_excepted_and_passes() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "occm.yaml",
        &exception("stackgate", MATCH_IT, "[\"false\"]"),
    );
    let (status, report) = check(&file, EARLY, &[]);
    assert_eq!(status, Some(0), "{report}");
    let results = self::results(&report);
    assert_eq!(results.len(), 1, "{results:?}");
    let (kind, level, code, message) = &results[0];
    assert_eq!(
        (kind.as_str(), level.as_str(), code.as_str()),
        ("excepted", "note", "serial-lb-api-calls/false")
    );
    for part in [
        "excepted from policy serial-lb-api-calls by StackgateException stackgate/occm-serial",
        "Octavia provider fixed upstream; ticket CHG-42",
        "until 2026-12-31T00:00:00Z",
        "provider-requires-serial-api-calls is set to a false value",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    assert!(!message.contains("expires in"), "{message}");
    // A directory of exception files reads the same.
    let (status, again) = check(dir.path(), EARLY, &[]);
    assert_eq!(status, Some(0));
    assert_eq!(self::results(&again), results);
}

#[test]
fn an_expired_exception_is_named_and_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "occm.yaml",
        &exception("stackgate", MATCH_IT, "[\"false\"]"),
    );
    for now in ["2026-12-31T00:00:00Z", "2027-02-01T00:00:00Z"] {
        let (status, report) = check(&file, now, &[]);
        assert_eq!(status, Some(1), "{now}: the denial fails the run again");
        let results = results(&report);
        assert_eq!(results.len(), 1, "{results:?}");
        let (kind, level, code, message) = &results[0];
        assert_eq!(
            (kind.as_str(), level.as_str(), code.as_str()),
            ("denial", "error", "serial-lb-api-calls/false")
        );
        assert!(
            message.contains(
                "exception StackgateException stackgate/occm-serial expired at \
                 2026-12-31T00:00:00Z; not applied"
            ),
            "{message}"
        );
    }
}

#[test]
fn inside_the_warning_window_the_excepted_finding_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "occm.yaml",
        &exception("stackgate", MATCH_IT, "[\"false\"]"),
    );
    let (status, report) = check(&file, "2026-12-25T00:00:00Z", &[]);
    assert_eq!(status, Some(0), "a warning does not fail by default");
    let results = results(&report);
    assert_eq!(results.len(), 1, "{results:?}");
    let (kind, level, _, message) = &results[0];
    assert_eq!((kind.as_str(), level.as_str()), ("excepted", "warning"));
    assert!(
        message.contains("it expires in 6 days, then the policy applies again"),
        "{message}"
    );
    let (status, _) = check(&file, "2026-12-25T00:00:00Z", &["--fail-on", "warning"]);
    assert_eq!(status, Some(1));
    // A narrower window (the flag) makes the same day plain active.
    let (_, report) = check(
        &file,
        "2026-12-25T00:00:00Z",
        &["--exception-warn-days", "3"],
    );
    assert_eq!(results_levels(&report), vec!["note".to_owned()]);
}

fn results_levels(report: &Value) -> Vec<String> {
    results(report).into_iter().map(|r| r.1).collect()
}

#[test]
fn an_exception_for_another_object_or_code_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        (
            "other-name.yaml",
            exception(
                "stackgate",
                &MATCH_IT.replace("[openstack-cloud-controller-manager]", "[other]"),
                "[\"false\"]",
            ),
        ),
        (
            "other-namespace.yaml",
            exception(
                "stackgate",
                &MATCH_IT.replace("[kube-system]", "[tenant-a]"),
                "[\"false\"]",
            ),
        ),
        (
            "other-kind.yaml",
            exception(
                "stackgate",
                &MATCH_IT.replace("[HelmChart]", "[HelmRelease]"),
                "[\"false\"]",
            ),
        ),
        (
            "other-code.yaml",
            exception("stackgate", MATCH_IT, "[missing]"),
        ),
    ] {
        let file = write(dir.path(), name, &text);
        let (status, report) = check(&file, EARLY, &[]);
        assert_eq!(status, Some(1), "{name}: {report}");
        let results = results(&report);
        assert_eq!(results.len(), 1, "{name}: {results:?}");
        assert_eq!(results[0].0, "denial", "{name}");
        assert!(!results[0].3.contains("StackgateException"), "{name}");
    }
}

#[test]
fn without_codes_every_finding_of_the_policy_is_excepted() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "all.yaml",
        &exception("stackgate", MATCH_IT, "[]"),
    );
    let (status, report) = check(&file, EARLY, &[]);
    assert_eq!(status, Some(0), "{report}");
    assert_eq!(results(&report)[0].0, "excepted");
}

#[test]
fn a_refused_exception_is_an_input_error_never_exempt_everything() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "unknown-field.yaml",
            exception("stackgate", MATCH_IT, "[\"false\"]") + "  exemptAll: true\n",
            "unknown field `exemptAll`",
        ),
        (
            "wrong-namespace.yaml",
            exception("tenant-a", MATCH_IT, "[\"false\"]"),
            "accepted only in namespace(s) stackgate",
        ),
        (
            "wildcard.yaml",
            exception(
                "stackgate",
                &MATCH_IT.replace("[kube-system]", "[\"*\"]"),
                "[\"false\"]",
            ),
            "no wildcards",
        ),
        (
            "too-long.yaml",
            exception("stackgate", MATCH_IT, "[\"false\"]")
                .replace("2026-12-31T00:00:00Z", "2027-12-31T00:00:00Z"),
            "more than the maximum lifetime (90 days",
        ),
        (
            "no-expiry.yaml",
            exception("stackgate", MATCH_IT, "[\"false\"]")
                .replace("  expires: \"2026-12-31T00:00:00Z\"\n", ""),
            "spec.expires is required",
        ),
    ];
    for (name, text, needle) in cases {
        let sub = dir.path().join(name.trim_end_matches(".yaml"));
        std::fs::create_dir(&sub).unwrap();
        // Beside a valid one: a refused document refuses the whole set.
        write(
            &sub,
            "a-valid.yaml",
            &exception("stackgate", MATCH_IT, "[\"false\"]").replace("occm-serial", "valid"),
        );
        let file = write(&sub, name, &text);
        let path = sub.to_str().unwrap();
        let (status, stdout, stderr) =
            stackgate(&["check", DENIED, "--exceptions", path, "--now", EARLY]);
        assert_eq!(status, Some(2), "{name}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{name}: no report: {stdout}");
        assert!(
            stderr.contains(needle),
            "{name}: {needle:?} not in {stderr}"
        );
        assert!(
            stderr.contains(&file.display().to_string()),
            "{name}: the file is named: {stderr}"
        );
    }
    // The namespace flag accepts another namespace.
    let file = dir.path().join("wrong-namespace/wrong-namespace.yaml");
    std::fs::remove_file(dir.path().join("wrong-namespace/a-valid.yaml")).unwrap();
    let (status, report) = check(&file, EARLY, &["--exception-namespaces", "ops,tenant-a"]);
    assert_eq!(status, Some(0), "{report}");
}

#[test]
fn a_missing_exceptions_path_or_a_bad_now_is_a_usage_error() {
    let (status, _, stderr) = stackgate(&[
        "check",
        DENIED,
        "--exceptions",
        "tests/fixtures/no-such-exceptions",
        "--now",
        EARLY,
    ]);
    assert_eq!(status, Some(2));
    assert!(
        stderr.contains("--exceptions: tests/fixtures/no-such-exceptions"),
        "{stderr}"
    );
    let (status, _, stderr) = stackgate(&["check", DENIED, "--now", "tomorrow"]);
    assert_eq!(status, Some(2));
    assert!(stderr.contains("not an RFC 3339 time"), "{stderr}");
}

#[test]
fn several_documents_in_one_file_are_all_read() {
    let dir = tempfile::tempdir().unwrap();
    let other = exception(
        "stackgate",
        &MATCH_IT.replace("[kube-system]", "[tenant-a]"),
        "[\"false\"]",
    )
    .replace("occm-serial", "tenant-a");
    let text = format!(
        "{other}---\n{}",
        exception("stackgate", MATCH_IT, "[\"false\"]")
    );
    let file = write(dir.path(), "both.yaml", &text);
    let (status, report) = check(&file, EARLY, &[]);
    assert_eq!(status, Some(0), "{report}");
    assert!(results(&report)[0].3.contains("stackgate/occm-serial"));
}

/// A cloud-config Secret without the serial setting: a warning and the mutation that adds it.
const MUTATED: &str = "tests/fixtures/gitops/repo/manifests/cloud-config.yaml";

#[test]
fn an_excepted_finding_is_not_fixed_either() {
    let dir = tempfile::tempdir().unwrap();
    let spec_match =
        "    kinds: [Secret]\n    namespaces: [kube-system]\n    names: [cloud-config]";
    let file = write(
        dir.path(),
        "secret.yaml",
        &exception("stackgate", spec_match, "[missing]"),
    );
    let path = file.to_str().unwrap();
    let (status, stdout, stderr) = stackgate(&[
        "check",
        "--format",
        "json",
        MUTATED,
        "--exceptions",
        path,
        "--now",
        EARLY,
    ]);
    assert_eq!(status, Some(0), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let kinds: Vec<String> = results(&report).into_iter().map(|r| r.0).collect();
    // The mutation would undo what the exception allows: neither it nor a fix is offered.
    assert_eq!(kinds, vec!["excepted".to_owned()], "{report}");
    assert_eq!(report["fixes"], serde_json::json!([]), "{report}");
    assert_eq!(report["summary"]["fixable"], 0);
}

// ---------------------------------------------------------------------------------------
// serve: the webhook over HTTPS, with the exception cell filled by the test

const VALIDATE: &str = "helmrelease/validate-create-openstack-cloud-controller-manager.json";

/// The captured Flux HelmRelease `kube-system/openstack-cloud-controller-manager` with serial
/// calls `false` (a denial) and only the serial policy speaking.
fn denied_review() -> Value {
    let mut v: Value = serde_json::from_slice(&captured(VALIDATE)).expect("captured JSON");
    let object = &mut v["request"]["object"];
    object["spec"]["values"]
        .as_object_mut()
        .expect("values")
        .remove("controllerExtraArgs");
    object["spec"]["values"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"] =
        json!(false);
    v["request"]["userInfo"] = json!({"username": "tenant-a", "groups": ["tenants"]});
    v
}

/// An exception for that HelmRelease, parsed as of `parsed_at`, ending `expires`.
fn helmrelease_exception(name: &str, parsed_at: Timestamp, expires: Timestamp) -> Exception {
    let text = exception(
        "stackgate",
        "    kinds: [HelmRelease]\n    namespaces: [kube-system]\n    names: [openstack-cloud-controller-manager]",
        "[\"false\"]",
    )
    .replace("occm-serial", name)
    .replace("2026-12-31T00:00:00Z", &expires.to_string());
    Exception::parse(
        "test",
        &text,
        &PolicySet::embedded().unwrap(),
        &ExceptionRules::default(),
        parsed_at,
    )
    .expect("a valid exception")
}

fn set_of(exceptions: Vec<Exception>) -> ExceptionSet {
    ExceptionSet {
        exceptions,
        rules: ExceptionRules::default(),
    }
}

async fn validate(client: &Client) -> Value {
    let body = serde_json::to_vec(&denied_review()).unwrap();
    let (status, out) = post(client, "/validate", body).await;
    assert_eq!(status, http::StatusCode::OK, "{out}");
    out["response"].clone()
}

#[tokio::test]
async fn serve_admits_what_an_exception_covers_until_it_expires() {
    let cell = ExceptionCell::holding(ExceptionSet::default());
    let state = AppState::new(Engine::new(PolicySet::embedded().unwrap()), Metrics::new())
        .with_fact_source(Arc::new(ExceptionSource::new(cell.clone())));
    let server = TestServer::start_with(|_| {}, state).await;
    let client = server.client().await;
    let now = Timestamp::now();
    let days = |n: i64| SignedDuration::from_hours(24 * n);

    // No exception: the tenant's write is denied.
    let r = validate(&client).await;
    assert_eq!(r["allowed"], false, "{r}");

    // An active exception: admitted, named in the audit annotations, no warning.
    cell.set(set_of(vec![helmrelease_exception(
        "active",
        now,
        now + days(60),
    )]));
    let r = validate(&client).await;
    assert_eq!(r["allowed"], true, "{r}");
    assert_eq!(
        r["auditAnnotations"]["serial-lb-api-calls-excepted"],
        "StackgateException stackgate/active",
        "{r}"
    );
    assert!(
        !r["warnings"].to_string().contains("StackgateException"),
        "{r}"
    );

    // Inside the warning window: admitted, with a warning that says when it ends.
    cell.set(set_of(vec![helmrelease_exception(
        "ending",
        now,
        now + days(3),
    )]));
    let r = validate(&client).await;
    assert_eq!(r["allowed"], true, "{r}");
    let warnings = r["warnings"].to_string();
    assert!(
        warnings.contains("StackgateException stackgate/ending")
            && warnings.contains("then the policy applies again"),
        "{r}"
    );

    // Expired (it ended a day ago): denied again, and the denial says which one ended.
    let parsed_at = now - days(10);
    cell.set(set_of(vec![helmrelease_exception(
        "ended",
        parsed_at,
        now - days(1),
    )]));
    let r = validate(&client).await;
    assert_eq!(r["allowed"], false, "{r}");
    let message = r["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("exception StackgateException stackgate/ended expired at")
            && message.contains("not applied"),
        "{message}"
    );
    assert!(
        r["auditAnnotations"]
            .get("serial-lb-api-calls-excepted")
            .is_none()
    );
}

// ---------------------------------------------------------------------------------------
// stackgate exceptions list

#[test]
fn exceptions_list_shows_each_state_and_names_what_it_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let one = |name: &str, expires: &str| {
        exception("stackgate", MATCH_IT, "[\"false\"]")
            .replace("occm-serial", name)
            .replace("2026-12-31T00:00:00Z", expires)
    };
    write(dir.path(), "a.yaml", &one("ending", "2026-12-03T00:00:00Z"));
    write(dir.path(), "b.yaml", &one("ended", "2026-11-20T00:00:00Z"));
    write(dir.path(), "c.yaml", &one("later", "2027-01-30T00:00:00Z"));
    let refused = write(
        dir.path(),
        "d.yaml",
        &one("bad", "2027-01-30T00:00:00Z").replace("serial-lb-api-calls", "no-such-policy"),
    );
    let path = dir.path().to_str().unwrap();
    let (status, stdout, stderr) = stackgate(&[
        "exceptions",
        "list",
        "--from",
        path,
        "--now",
        EARLY,
        "--format",
        "json",
    ]);
    assert_eq!(status, Some(0), "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    let rows: Vec<(String, String, Value)> = listed["exceptions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["state"].as_str().unwrap().to_owned(),
                r["daysLeft"].clone(),
            )
        })
        .collect();
    let refused = refused.display().to_string();
    assert_eq!(
        rows,
        vec![
            (
                "stackgate/ending".to_owned(),
                "expiring".to_owned(),
                json!(4)
            ),
            (
                "stackgate/ended".to_owned(),
                "expired".to_owned(),
                Value::Null
            ),
            (
                "stackgate/later".to_owned(),
                "active".to_owned(),
                Value::Null
            ),
            (refused.clone(), "invalid".to_owned(), Value::Null),
        ]
    );
    assert!(
        listed["exceptions"][3]["detail"]
            .as_str()
            .unwrap()
            .contains("\"no-such-policy\" is not a policy of the set")
    );
    // The table says the same.
    let (status, table, _) = stackgate(&["exceptions", "list", "--from", path, "--now", EARLY]);
    assert_eq!(status, Some(0));
    assert!(table.contains("expiring (4d)"), "{table}");
    assert!(table.contains("[CHG-42]"), "{table}");
    // An unreadable source is exit code 2.
    let (status, _, stderr) = stackgate(&["exceptions", "list", "--from", "tests/no-such-dir"]);
    assert_eq!(status, Some(2));
    assert!(stderr.contains("tests/no-such-dir"), "{stderr}");
}

#[test]
fn an_exception_for_another_object_leaves_the_fix_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let spec_match = "    kinds: [Secret]\n    namespaces: [kube-system]\n    names: [other]";
    let file = write(
        dir.path(),
        "other.yaml",
        &exception("stackgate", spec_match, "[missing]"),
    );
    let path = file.to_str().unwrap();
    let (status, stdout, stderr) = stackgate(&[
        "check",
        "--format",
        "json",
        MUTATED,
        "--exceptions",
        path,
        "--now",
        EARLY,
    ]);
    assert_eq!(status, Some(0), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let kinds: Vec<String> = results(&report).into_iter().map(|r| r.0).collect();
    // As without exceptions: the warning and the mutation that fixes it, and the fix.
    assert_eq!(
        kinds,
        vec!["warning".to_owned(), "mutation".to_owned()],
        "{report}"
    );
    assert_eq!(
        report["fixes"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    assert_eq!(report["results"][0]["fixedByPatch"], true, "{report}");
}
