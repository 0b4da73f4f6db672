//! `stackgate check` and a ConfigMap/Secret labelled `stackgate.dev/ccm-values=<key>` (the CCM
//! chart's values, a Flux `valuesFrom` source): alone it is evaluated as the webhook evaluates
//! it; with a HelmRelease of the same run reading it, the release's merged evaluation reports
//! what it holds, naming it as the source, and the object is not evaluated twice.

use std::path::PathBuf;

use base64::Engine as _;
use clap::Parser;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use stackgate::report::{Level, Report};

const LABELLED: &str = "tests/fixtures/gitops/carriers/opencenter-labelled-values";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn run(argv: &[&str], stdin: &str) -> Report {
    let mut all = vec!["check"];
    all.extend_from_slice(argv);
    let options = CheckOptions::from(&Cmd::try_parse_from(all).expect("valid flags").args);
    let engine = Engine::new(PolicySet::embedded().expect("embedded policies load"));
    check::check(&options, &engine, &mut stdin.as_bytes()).expect("check runs")
}

/// (object, level, message) of every finding but `cluster-name`'s (the hardened values keep
/// the chart's default cluster name, a true finding asserted in tests/check_carriers.rs).
fn findings(report: &Report) -> Vec<(String, Level, String)> {
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| o.items.iter().map(move |i| (o, i)))
        .filter(|(_, i)| i.rule != "cluster-name")
        .map(|(o, i)| (o.object.clone(), i.level, i.message.clone()))
        .collect()
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn hardened(serial: bool) -> String {
    let values = std::fs::read_to_string(
        root()
            .join(LABELLED)
            .join("helm-values/hardened-values-2.33.1.yaml"),
    )
    .expect("values");
    if serial {
        values
    } else {
        values.replace(
            "provider-requires-serial-api-calls: true",
            "provider-requires-serial-api-calls: false",
        )
    }
}

/// What `kustomize build` prints for the labelled generator: the Secret with base64 data.
fn labelled_secret(values: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: openstack-ccm-values-base\n  \
         namespace: openstack-ccm\n  labels:\n    stackgate.dev/ccm-values: hardened.yaml\n\
         type: Opaque\ndata:\n  hardened.yaml: {}\n",
        base64::engine::general_purpose::STANDARD.encode(values)
    )
}

#[test]
fn the_fixture_layout_gives_no_finding() {
    let dir = root().join(LABELLED);
    let report = run(&[dir.to_str().expect("UTF-8 path")], "");
    assert_eq!(findings(&report), Vec::new());
    assert_eq!(report.exit_code(), 0);
}

#[test]
fn alone_the_labelled_secret_is_checked_where_it_is_written() {
    let report = run(&["-"], &labelled_secret(&hardened(false)));
    let found = findings(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    let (object, level, message) = &found[0];
    assert_eq!(*level, Level::Error);
    assert!(object.contains("openstack-ccm-values-base"), "{object}");
    assert!(
        message.contains("data[\"hardened.yaml\"] line 118: ")
            && message
                .contains("\nAt cloudConfig.loadBalancer.provider-requires-serial-api-calls.\n")
            && message.contains("is set to a false value"),
        "{message}"
    );
    // The real values with serial calls on: nothing.
    assert_eq!(
        findings(&run(&["-"], &labelled_secret(&hardened(true)))),
        Vec::new()
    );
}

#[test]
fn read_by_a_helmrelease_of_the_run_it_is_reported_once_by_the_release() {
    let release =
        std::fs::read_to_string(root().join(LABELLED).join("helmrelease.yaml")).expect("hr");
    let stream = format!("{}---\n{release}", labelled_secret(&hardened(false)));
    let report = run(&["-"], &stream);
    let found = findings(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    let (object, level, message) = &found[0];
    assert_eq!(*level, Level::Error);
    assert!(object.contains("HelmRelease"), "{object}");
    assert!(
        message.contains("is set to a false value")
            && message
                .contains("Secret openstack-ccm-values-base key hardened.yaml, from <stdin>:1"),
        "{message}"
    );
}
