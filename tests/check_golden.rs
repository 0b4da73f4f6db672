//! `stackgate check` over the GitOps fixture repository (`tests/fixtures/gitops/repo`): golden
//! outputs for every format, and line numbers that point at the line a finding is about.
//!
//! The goldens hold the engine's messages, so a policy text change changes them: regenerate
//! with `UPDATE_GOLDEN=1 cargo test --test check_golden` and review the diff.

use std::path::Path;

use clap::Parser;
use serde_json::Value;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;

const REPO: &str = "tests/fixtures/gitops/repo";
const GOLDEN: &str = "tests/fixtures/gitops/golden";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn args(extra: &[&str]) -> CheckOptions {
    let mut argv = vec![
        "check",
        REPO,
        "--values-for",
        "openstack-cloud-controller-manager=clusters/*/occm-values.yaml",
        "--values-for",
        "openstack-cloud-controller-manager=base/occm/values.yaml",
    ];
    argv.extend_from_slice(extra);
    CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args)
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn run(extra: &[&str]) -> (u8, String) {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).expect("cd to the crate");
    let mut out = Vec::new();
    let code =
        check::run(&args(extra), &engine(), &mut std::io::empty(), &mut out).expect("check runs");
    (code, String::from_utf8(out).expect("UTF-8 report"))
}

/// Compares `actual` with the golden file, or rewrites it with `UPDATE_GOLDEN=1`.
fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(GOLDEN)
        .join(name);
    // The tool version is not part of the contract.
    let actual = actual.replace(
        &format!("\"version\": \"{}\"", env!("CARGO_PKG_VERSION")),
        "\"version\": \"VERSION\"",
    );
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("mkdir golden");
        std::fs::write(&path, &actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    if expected != actual {
        let diff = similar::TextDiff::from_lines(&expected, &actual)
            .unified_diff()
            .header("golden", "actual")
            .to_string();
        panic!("{name} differs from the golden file (UPDATE_GOLDEN=1 rewrites it):\n{diff}");
    }
}

#[test]
fn text_golden_and_exit_code() {
    let (code, out) = run(&[]);
    assert_eq!(code, 1, "denials exit 1:\n{out}");
    golden("check.txt", &out);
}

#[test]
fn json_golden() {
    let (code, out) = run(&["--format", "json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(v["summary"]["exitCode"], 1);
    golden("check.json", &out);
}

#[test]
fn sarif_golden() {
    let (_, out) = run(&["--format", "sarif"]);
    let v: Value = serde_json::from_str(&out).expect("SARIF is JSON");
    assert_eq!(v["version"], "2.1.0");
    let results = v["runs"][0]["results"].as_array().expect("results");
    assert!(
        results.iter().all(
            |r| r["locations"][0]["physicalLocation"]["region"]["startLine"].as_u64() >= Some(1)
        )
    );
    golden("check.sarif", &out);
}

#[test]
fn junit_golden() {
    let (_, out) = run(&["--format", "junit"]);
    assert!(out.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites "));
    golden("check.junit.xml", &out);
}

/// Every error and warning points at the line it is about.
#[test]
fn line_numbers_point_at_the_right_line() {
    let (_, out) = run(&["--format", "json"]);
    let v: Value = serde_json::from_str(&out).expect("JSON report");
    let line_of = |file: &str, line: u64| -> String {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
            .expect("fixture");
        text.lines()
            .nth(line as usize - 1)
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let mut seen = Vec::new();
    for r in v["results"].as_array().expect("results") {
        let (file, line, rule, level) = (
            r["file"].as_str().unwrap_or_default(),
            r["line"].as_u64().unwrap_or_default(),
            r["rule"].as_str().unwrap_or_default(),
            r["level"].as_str().unwrap_or_default(),
        );
        if level == "note" {
            continue;
        }
        let text = line_of(file, line);
        let short = file.trim_start_matches(&format!("{REPO}/"));
        seen.push(format!("{short}:{line} {rule} {text}"));
    }
    let expected = [
        "argocd/occm-values-string.yaml:19 serial-lb-api-calls cloudConfig:",
        "clusters/customer-a/occm-values.yaml:11 serial-lb-api-calls provider-requires-serial-api-calls: false",
        "clusters/customer-b/occm-values.yaml:2 serial-lb-api-calls cloudConfig:",
        "clusters/customer-c/occm-values.yaml:8 known-bad-lb-settings lb-provider: ovn",
        "flux/occm-helmrelease.yaml:29 serial-lb-api-calls cloudConfig:",
        "manifests/cloud-config.yaml:9 serial-lb-api-calls cloud.conf: |",
        "rke2/occm-helmchart.yaml:29 serial-lb-api-calls provider-requires-serial-api-calls: \"false\"",
    ];
    for e in expected {
        assert!(
            seen.iter().any(|s| s == e),
            "missing {e:?} in\n{}",
            seen.join("\n")
        );
    }
}

/// No output format ever carries a credential value from the fixtures.
#[test]
fn no_format_prints_credentials() {
    for format in ["text", "json", "sarif", "junit"] {
        let (_, out) = run(&["--format", format]);
        for secret in ["fake-password", "fake-app-cred-secret"] {
            assert!(!out.contains(secret), "{format} output shows {secret}");
        }
    }
}

/// A RKE2 HelmChart with its HelmChartConfig (`tests/fixtures/gitops/carriers/
/// rke2-helmchartconfig`): every format reports the merged finding in the HelmChartConfig's
/// file, at the line that sets the value.
#[test]
fn helmchartconfig_goldens() {
    std::env::set_current_dir(env!("CARGO_MANIFEST_DIR")).expect("cd to the crate");
    for (format, name) in [
        ("text", "rke2-helmchartconfig.txt"),
        ("json", "rke2-helmchartconfig.json"),
        ("sarif", "rke2-helmchartconfig.sarif"),
        ("junit", "rke2-helmchartconfig.junit.xml"),
    ] {
        let argv = [
            "check",
            "tests/fixtures/gitops/carriers/rke2-helmchartconfig",
            "--format",
            format,
        ];
        let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args);
        let mut out = Vec::new();
        let code =
            check::run(&options, &engine(), &mut std::io::empty(), &mut out).expect("check runs");
        assert_eq!(code, 1, "{format}: the HelmChartConfig's false is a denial");
        let out = String::from_utf8(out).expect("UTF-8 report");
        assert!(
            out.contains("helmchartconfig.yaml"),
            "{format}: placed in the HelmChartConfig's file:\n{out}"
        );
        golden(name, &out);
    }
}
