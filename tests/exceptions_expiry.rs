//! `expires` required or not (issue 37: "required by default"): with the default an exception
//! without `expires` is refused (exit code 2 in `check`, `invalid` in `exceptions list`); with
//! `--exception-require-expiry=false` (the chart's `exceptions.requireExpiry: false`) it
//! exempts with no end, is listed as "no expiry", and never turns into a warning, at any
//! instant; one that does carry `expires` still ends there.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// An RKE2 HelmChart whose values set `provider-requires-serial-api-calls: "false"`: a denial
/// of policy serial-lb-api-calls, code `false`.
const DENIED: &str = "tests/fixtures/gitops/repo/rke2/occm-helmchart.yaml";

fn exception(expires: Option<&str>) -> String {
    let mut text = "apiVersion: stackgate.dev/v1alpha1
kind: StackgateException
metadata:
  name: occm-serial
  namespace: stackgate
spec:
  policy: serial-lb-api-calls
  codes: [\"false\"]
  match:
    kinds: [HelmChart]
    namespaces: [kube-system]
    names: [openstack-cloud-controller-manager]
  reason: Octavia provider fixed upstream
"
    .to_owned();
    if let Some(expires) = expires {
        text.push_str(&format!("  expires: \"{expires}\"\n"));
    }
    text
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("exception.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn stackgate(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .env("STACKGATE_LOG_LEVEL", "off")
        .env_remove("STACKGATE_EXCEPTION_REQUIRE_EXPIRY")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `check --format json DENIED --exceptions PATH --now NOW extra…`.
fn check(path: &Path, now: &str, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec![
        "check",
        "--format",
        "json",
        DENIED,
        "--exceptions",
        path.to_str().unwrap(),
        "--now",
        now,
    ];
    args.extend_from_slice(extra);
    stackgate(&args)
}

/// (kind, level, code) of every result of a JSON report.
fn results(stdout: &str) -> Vec<(String, String, String)> {
    let report: Value = serde_json::from_str(stdout).unwrap();
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap().to_owned(),
                r["level"].as_str().unwrap().to_owned(),
                r["code"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn by_default_an_exception_without_expires_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &exception(None));
    let (status, _, stderr) = check(&path, "2026-11-28T12:00:00Z", &[]);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("spec.expires is required"), "{stderr}");
    let (status, stdout, stderr) = stackgate(&[
        "exceptions",
        "list",
        "--from",
        path.to_str().unwrap(),
        "--now",
        "2026-11-28T12:00:00Z",
    ]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(
        stdout.contains("invalid") && stdout.contains("spec.expires is required"),
        "{stdout}"
    );
}

#[test]
fn when_not_required_an_exception_without_expires_never_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &exception(None));
    let optional = ["--exception-require-expiry=false"];
    // Now and in ten years: excepted, never a warning of an end.
    for now in ["2026-11-28T12:00:00Z", "2036-11-28T12:00:00Z"] {
        let (status, stdout, stderr) = check(&path, now, &optional);
        assert_eq!(status, Some(0), "{now}: {stderr}");
        // Excepted, as a note (a warning would mean it is about to end).
        assert_eq!(
            results(&stdout),
            [(
                "excepted".to_owned(),
                "note".to_owned(),
                "serial-lb-api-calls/false".to_owned()
            )],
            "{now}"
        );
    }
    let (status, stdout, stderr) = stackgate(&[
        "exceptions",
        "list",
        "--from",
        path.to_str().unwrap(),
        "--now",
        "2036-11-28T12:00:00Z",
        "--exception-require-expiry",
        "false",
    ]);
    assert_eq!(status, Some(0), "{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("stackgate/occm-serial"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(row.contains("active") && row.contains("no expiry"), "{row}");
    // The environment variable the chart sets does the same.
    let out = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["check", "--format", "json", DENIED, "--exceptions"])
        .arg(&path)
        .args(["--now", "2026-11-28T12:00:00Z"])
        .env("STACKGATE_LOG_LEVEL", "off")
        .env("STACKGATE_EXCEPTION_REQUIRE_EXPIRY", "false")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn when_not_required_an_exception_with_expires_still_ends_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), &exception(Some("2026-12-31T00:00:00Z")));
    let (status, stdout, stderr) = check(
        &path,
        "2027-01-02T00:00:00Z",
        &["--exception-require-expiry=false"],
    );
    assert_eq!(status, Some(1), "{stderr}");
    assert!(
        results(&stdout)
            .iter()
            .any(|(kind, _, code)| kind == "denial" && code.ends_with("false")),
        "{stdout}"
    );
}
