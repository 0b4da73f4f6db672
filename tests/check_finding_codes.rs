//! `stackgate check --format json` and `--format sarif` carry each finding's code, in the form
//! `stackgate explain` reads (`<family>/<code>`, or an engine code alone), taken from the
//! engine's structured findings: a denial and a warning each show theirs, SARIF keeps the rule
//! family as its `ruleId`, puts the code in `properties.code` and names the rule's codes in its
//! `help`, and `stackgate explain` accepts
//! every code the reports print.

use std::process::Command;

use serde_json::Value;

/// An RKE2 HelmChart whose values set `serialize-lb-api-calls: false` (a denial).
const DENIAL: &str = "tests/fixtures/gitops/repo/rke2/occm-helmchart.yaml";
/// A cloud-config Secret without `serialize-lb-api-calls` (a warning, and the mutation that adds
/// it).
const WARNING: &str = "tests/fixtures/gitops/repo/manifests/cloud-config.yaml";

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

/// The report of `check --format FORMAT` over both inputs, parsed.
fn check(format: &str) -> Value {
    let (status, stdout, stderr) = stackgate(&["check", "--format", format, DENIAL, WARNING]);
    assert_eq!(status, Some(1), "a denial fails the run: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{format} is JSON: {e}\n{stdout}"))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no string at {pointer} in {v}"))
}

/// `(file, level, code)` of every JSON result.
fn json_codes(report: &Value) -> Vec<(String, String, String)> {
    report["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            (
                str_at(r, "/file").to_owned(),
                str_at(r, "/level").to_owned(),
                str_at(r, "/code").to_owned(),
            )
        })
        .collect()
}

#[test]
fn json_results_carry_the_code_of_a_denial_and_a_warning() {
    let codes = json_codes(&check("json"));
    let expected = [
        (DENIAL, "error", "serial-lb-api-calls/false"),
        (WARNING, "warning", "serial-lb-api-calls/missing"),
        (WARNING, "note", "mutation"),
    ];
    for (file, level, code) in expected {
        assert!(
            codes
                .iter()
                .any(|(f, l, c)| f == file && l == level && c == code),
            "no {level} {code} for {file} in {codes:?}"
        );
    }
    // Nothing else: the two inputs have exactly these findings.
    assert_eq!(codes.len(), expected.len(), "{codes:?}");
}

#[test]
fn sarif_results_keep_the_rule_as_rule_id_and_carry_the_code() {
    let sarif = check("sarif");
    let results = sarif
        .pointer("/runs/0/results")
        .and_then(Value::as_array)
        .expect("SARIF results");
    let found: Vec<(String, String, String, String)> = results
        .iter()
        .map(|r| {
            (
                str_at(r, "/locations/0/physicalLocation/artifactLocation/uri").to_owned(),
                str_at(r, "/level").to_owned(),
                str_at(r, "/ruleId").to_owned(),
                str_at(r, "/properties/code").to_owned(),
            )
        })
        .collect();
    for (file, level, rule, code) in [
        (
            DENIAL,
            "error",
            "serial-lb-api-calls",
            "serial-lb-api-calls/false",
        ),
        (
            WARNING,
            "warning",
            "serial-lb-api-calls",
            "serial-lb-api-calls/missing",
        ),
        (WARNING, "note", "serial-lb-api-calls", "mutation"),
    ] {
        assert!(
            found
                .iter()
                .any(|(f, l, r, c)| f == file && l == level && r == rule && c == code),
            "no {level} [{rule}] {code} for {file} in {found:?}"
        );
    }
    // Every ruleId is one of the run's rules (GitHub code scanning groups alerts by it).
    let rules: Vec<&str> = sarif
        .pointer("/runs/0/tool/driver/rules")
        .and_then(Value::as_array)
        .expect("SARIF rules")
        .iter()
        .map(|r| str_at(r, "/id"))
        .collect();
    assert_eq!(rules, ["serial-lb-api-calls"]);
    // Code scanning shows the rule's help, not a result's properties: it names the codes.
    let help = str_at(&sarif, "/runs/0/tool/driver/rules/0/help/text");
    for code in ["serial-lb-api-calls/false", "serial-lb-api-calls/missing"] {
        assert!(help.contains(code), "{code} not in the rule's help: {help}");
    }
    // The JSON and SARIF reports give the same codes, finding for finding.
    let json: Vec<String> = json_codes(&check("json"))
        .into_iter()
        .map(|(_, _, c)| c)
        .collect();
    let sarif_codes: Vec<String> = found.into_iter().map(|(_, _, _, c)| c).collect();
    assert_eq!(json, sarif_codes);
}

#[test]
fn explain_accepts_every_code_the_reports_print() {
    let mut codes: Vec<String> = json_codes(&check("json"))
        .into_iter()
        .map(|(_, _, c)| c)
        .collect();
    codes.sort();
    codes.dedup();
    assert_eq!(codes.len(), 3, "{codes:?}");
    for code in codes {
        let (status, stdout, stderr) = stackgate(&["explain", &code]);
        assert_eq!(status, Some(0), "explain {code}: {stderr}");
        assert!(stdout.starts_with(&code), "explain {code}:\n{stdout}");
    }
}

/// The warning input's Secret with the exemption annotation of the policy that warns about it.
fn exempted_input() -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(WARNING))
        .expect("read the fixture")
        .replacen(
            "  namespace: kube-system\n",
            "  namespace: kube-system\n  annotations:\n    stackgate.dev/exempt.serial-lb-api-calls: \"tested\"\n",
            1,
        )
}

/// `stackgate check --format json [args] -` on `input`: the report's results.
fn check_stdin(args: &[&str], input: &str) -> Vec<Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(["check", "--format", "json"])
        .args(args)
        .arg("-")
        .env("STACKGATE_LOG_LEVEL", "off")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run stackgate");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), input.as_bytes())
        .expect("write stdin");
    let out = child.wait_with_output().expect("stackgate ends");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    report["results"].as_array().expect("results").clone()
}

#[test]
fn an_exemption_has_no_code() {
    // A policy that honours unverified annotations (check cannot see who set one).
    let dir = tempfile::tempdir().expect("temp dir");
    let policy = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/serial-lb-api-calls.yaml"),
    )
    .expect("read the policy")
    .replace(
        "    allowedGroups: [system:masters]\n",
        "    allowedGroups: [system:masters]\n    unverified: honour\n",
    );
    assert!(policy.contains("unverified: honour"), "{policy}");
    std::fs::write(dir.path().join("serial-lb-api-calls.yaml"), policy).expect("write");
    let policies = dir.path().to_str().expect("utf-8 path");
    let results = check_stdin(&["--policies", policies], &exempted_input());
    let exemption = results
        .iter()
        .find(|r| r["kind"] == "exemption")
        .unwrap_or_else(|| panic!("no exemption in {results:?}"));
    assert_eq!(exemption["rule"], "serial-lb-api-calls");
    assert_eq!(exemption["code"], Value::Null);
    assert!(
        exemption["message"]
            .as_str()
            .unwrap()
            .contains("unverified"),
        "{exemption}"
    );
    assert!(
        results.iter().all(|r| r["kind"] != "warning"),
        "the exempted warning is not reported: {results:?}"
    );
}

#[test]
fn an_unverified_exemption_is_not_applied_by_default_and_has_a_code() {
    let results = check_stdin(&[], &exempted_input());
    assert!(
        results.iter().all(|r| r["kind"] != "exemption"),
        "{results:?}"
    );
    let codes: Vec<&str> = results
        .iter()
        .filter(|r| r["rule"] == "serial-lb-api-calls")
        .filter_map(|r| r["code"].as_str())
        .collect();
    assert!(codes.contains(&"exemption-unverified"), "{results:?}");
    assert!(
        codes.contains(&"serial-lb-api-calls/missing"),
        "the policy still applies: {results:?}"
    );
    let (status, stdout, stderr) = stackgate(&["explain", "exemption-unverified"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(stdout.starts_with("exemption-unverified"), "{stdout}");
}

/// The integrity rule's warnings for values the CCM accepts but does not act on end with their
/// upstream source as one line of text (the source constant once carried two runs of 33 spaces
/// into every such warning): the whole line `check` prints, as a golden.
#[test]
fn a_silent_value_warning_reads_as_one_line_with_its_source() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cloud-provider-config\n  \
         namespace: openshift-config\ndata:\n  config: |\n    [Global]\n    tls-insecure = TRUE\n    \
         [LoadBalancer]\n    provider-requires-serial-api-calls = true\n",
    )
    .unwrap();
    let path = dir.path().join("cm.yaml");
    let (status, stdout, stderr) = stackgate(&["check", path.to_str().unwrap()]);
    assert_eq!(status, Some(0), "{stderr}");
    let line = stdout.lines().next().unwrap_or_default();
    assert_eq!(
        line.split_once(": warning ").map(|(_, rest)| rest),
        Some(
            "[cloud-config-integrity/tls-insecure-not-bool] ConfigMap \
             openshift-config/cloud-provider-config \
             data[\"config\"] line 2: [Global] tls-insecure is neither exactly `true` nor \
             `false`. Fix: write true or false. The CCM reads it as a string and turns \
             certificate verification off only for exactly `true` (so `True`, `yes` or `1` keep \
             it on) (cloud-provider-openstack v1.36.0 pkg/openstack/openstack.go (ReadConfig, \
             LoadBalancer()), pkg/util/metadata/metadata.go (CheckMetadataSearchOrder), \
             pkg/client/client.go (tls-insecure))."
        ),
        "{stdout}"
    );
}

/// Every `[rule/code]` tag of a text report (the golden reports of `check` over the GitOps
/// fixture repository and of `audit`) is what `stackgate explain` takes: a reader copies the
/// tag and gets the explanation.
#[test]
fn explain_accepts_every_tag_the_text_reports_print() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut tags = Vec::new();
    for golden in ["gitops/golden/check.txt", "audit/golden/audit.txt"] {
        let text = std::fs::read_to_string(root.join(golden)).expect("golden report");
        for line in text.lines() {
            for level in ["error", "warning", "note"] {
                if let Some((_, rest)) = line.split_once(&format!(": {level} ["))
                    && let Some((tag, _)) = rest.split_once(']')
                    && tag.contains('/')
                {
                    tags.push(tag.to_owned());
                }
            }
        }
    }
    tags.sort();
    tags.dedup();
    assert!(tags.len() >= 4, "{tags:?}");
    for tag in tags {
        let (status, stdout, stderr) = stackgate(&["explain", &tag]);
        assert_eq!(status, Some(0), "explain {tag}: {stderr}");
        let code = tag.rsplit('/').next().unwrap();
        assert!(stdout.contains(code), "explain {tag}:\n{stdout}");
    }
}
