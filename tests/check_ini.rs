//! `stackgate check` on plain INI cloud configs: a `cloud.conf` named on the command line or
//! matched by `--ini GLOB` is checked with every cloud-config rule, lines are lines of the
//! file, `--fix` edits it losslessly, and no format prints a value from it.

use std::path::Path;

use clap::Parser;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use stackgate::report::ItemKind;

const CONF: &str = "[Global]\nauth-url = https://keystone.example.test:5000/v3\n\
                    password = canary-Zq7-secret\nregion = RegionOne\n[LoadBalancer]\n\
                    lb-provider = ovn\nuse-octavia = false\nmonitor-delay = 5\n";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn options(argv: &[&str]) -> CheckOptions {
    let mut all = vec!["check"];
    all.extend_from_slice(argv);
    CheckOptions::from(&Cmd::try_parse_from(all).expect("valid flags").args)
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("clusters/a")).unwrap();
    std::fs::write(dir.path().join("clusters/a/cloud.conf"), CONF).unwrap();
    std::fs::write(dir.path().join("clusters/a/openstack.ini"), CONF).unwrap();
    dir
}

fn run(argv: &[&str]) -> (u8, String) {
    let mut out = Vec::new();
    let code =
        check::run(&options(argv), &engine(), &mut std::io::empty(), &mut out).expect("check runs");
    (code, String::from_utf8(out).expect("utf-8"))
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn a_named_cloud_conf_is_checked_with_every_cloud_config_rule() {
    let dir = repo();
    let file = dir.path().join("clusters/a/cloud.conf");
    let report =
        check::check(&options(&[&s(&file)]), &engine(), &mut std::io::empty()).expect("runs");
    let f = &report.files[0];
    assert!(f.problems.is_empty(), "{:?}", f.problems);
    let mut seen: Vec<(usize, &str, ItemKind)> = f.objects[0]
        .items
        .iter()
        .map(|i| (i.line, i.rule.as_str(), i.kind))
        .collect();
    seen.sort_by_key(|(l, r, _)| (*l, *r));
    assert_eq!(
        seen,
        vec![
            (1, "serial-lb-api-calls", ItemKind::Warning),
            (6, "known-bad-lb-settings", ItemKind::Denial),
            (7, "cloud-config-integrity", ItemKind::Warning),
            (7, "known-bad-lb-settings", ItemKind::Denial),
            (8, "cloud-config-integrity", ItemKind::Denial),
            (9, "serial-lb-api-calls", ItemKind::Mutation),
        ]
    );
    assert_eq!(report.exit_code(), 1);
}

#[test]
fn walking_reads_ini_only_through_the_ini_glob() {
    let dir = repo();
    let (code, out) = run(&[&s(dir.path())]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("0 files"), "{out}");
    let (code, out) = run(&[&s(dir.path()), "--ini", "**/cloud.conf"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("clusters/a/cloud.conf:6: error"), "{out}");
    assert!(!out.contains("openstack.ini"), "{out}");
}

#[test]
fn no_format_prints_a_value_of_the_file() {
    let dir = repo();
    let file = s(&dir.path().join("clusters/a/cloud.conf"));
    for format in ["text", "json", "sarif", "junit"] {
        let (_, out) = run(&[&file, "--format", format]);
        assert!(!out.contains("canary-Zq7-secret"), "{format}: {out}");
        assert!(!out.contains("keystone.example.test"), "{format}: {out}");
    }
}

#[test]
fn fix_inserts_one_line_and_the_rerun_has_no_fix_left() {
    let dir = repo();
    let file = dir.path().join("clusters/a/cloud.conf");
    let (_, out) = run(&[&s(&file), "--fix"]);
    assert!(out.contains("fixed 1 file"), "{out}");
    let fixed = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        fixed,
        format!("{CONF}provider-requires-serial-api-calls = true\n")
    );
    let report =
        check::check(&options(&[&s(&file)]), &engine(), &mut std::io::empty()).expect("runs");
    assert!(report.files[0].objects[0].verdict.patch.is_empty());
}

#[test]
fn a_glob_that_matches_nothing_is_a_usage_error() {
    let dir = repo();
    let root = s(dir.path());
    for (flag, glob) in [
        ("--ini", "**/nothing.conf"),
        ("--exclude", "vendor/**"),
        ("--values-for", "occm=clusters/*/occm-values.yaml"),
    ] {
        let result = check::check(
            &options(&[&root, flag, glob]),
            &engine(),
            &mut std::io::empty(),
        );
        let err = result.expect_err("a usage error").to_string();
        let shown = glob.split_once('=').map_or(glob, |(_, g)| g);
        assert_eq!(
            err,
            format!(
                "{flag} {shown:?} matches no file among the paths checked; fix the glob or drop \
                 the flag"
            )
        );
    }
    // A glob that matches is fine.
    assert!(
        check::check(
            &options(&[&root, "--exclude", "clusters/**"]),
            &engine(),
            &mut std::io::empty()
        )
        .is_ok()
    );
}

#[test]
fn sarif_names_each_source_once_in_its_rule_and_results_stay_short() {
    let dir = repo();
    let file = s(&dir.path().join("clusters/a/cloud.conf"));
    let (_, out) = run(&[&file, "--format", "sarif"]);
    let sarif: serde_json::Value = serde_json::from_str(&out).expect("SARIF JSON");
    let sarif_run = &sarif["runs"][0];
    let rules = sarif_run["tool"]["driver"]["rules"]
        .as_array()
        .expect("rules");
    assert_eq!(rules.len(), 3);
    for rule in rules {
        let help = rule["help"]["text"].as_str().expect("help");
        assert!(help.starts_with("Source: "), "{help}");
        // The first line is the source; the rule's finding codes follow it.
        let source = help["Source: ".len()..].lines().next().unwrap_or_default();
        // As it is written in the JSON text (a source may quote "true").
        let written = serde_json::to_string(source).expect("JSON string");
        let written = &written[1..written.len() - 1];
        assert_eq!(out.matches(written).count(), 1, "{source}");
    }
    for result in sarif_run["results"].as_array().expect("results") {
        let message = result["message"]["text"].as_str().expect("text");
        assert!(!message.contains("source:"), "{message}");
    }
    // Text: each source once, after the findings.
    let (_, text) = run(&[&file]);
    assert_eq!(
        text.matches("source of [known-bad-lb-settings]: ").count(),
        1
    );
    assert!(!text.contains("; source: "), "{text}");
}
