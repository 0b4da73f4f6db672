//! `stackgate check` over the carriers of issue 14 (`tests/fixtures/gitops/carriers/`): Flux
//! `valuesFrom` resolved from the run's objects (openCenter's layout: a kustomize
//! `secretGenerator` next to the HelmRelease), and said to be unseen when it cannot be.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use clap::Parser;
use stackgate::check::{self, CheckOptions, Level, Report};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;

const OPENCENTER: &str = "tests/fixtures/gitops/carriers/opencenter-openstack-ccm";

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

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(argv: &[&str], stdin: &str) -> Report {
    check::check(&options(argv), &engine(), &mut stdin.as_bytes()).expect("check runs")
}

/// The findings of every rule but `cluster-name` (these tests are about where the cloud config
/// comes from; the cluster-name family reads `cluster.name` from the same merged values and is
/// asserted on its own where it fires).
fn messages(report: &Report) -> Vec<(Level, String)> {
    rule_messages(report, |rule| rule != "cluster-name")
}

fn rule_messages(report: &Report, keep: impl Fn(&str) -> bool) -> Vec<(Level, String)> {
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .filter(|i| keep(&i.rule))
        .map(|i| (i.level, i.message.clone()))
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

#[test]
fn opencenter_layout_gives_no_finding() {
    let dir = root().join(OPENCENTER);
    let report = run(&[dir.to_str().expect("UTF-8 path")], "");
    assert_eq!(messages(&report), Vec::new());
    // The one finding is a true one: the generated values keep the chart's default
    // `cluster.name: kubernetes` (hardened-values-2.33.1.yaml line 154).
    let names = rule_messages(&report, |rule| rule == "cluster-name");
    assert_eq!(names.len(), 1, "{names:?}");
    assert_eq!(names[0].0, Level::Warning);
    assert!(
        names[0]
            .1
            .contains("runs with the default cluster name \"kubernetes\""),
        "{names:?}"
    );
    assert_eq!(report.exit_code(), 0);
}

#[test]
fn helmrelease_alone_says_what_it_cannot_see_and_claims_nothing() {
    let file = root().join(OPENCENTER).join("helmrelease.yaml");
    let report = run(&[file.to_str().expect("UTF-8 path")], "");
    let found = messages(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    let (level, message) = &found[0];
    assert_eq!(*level, Level::Warning);
    assert!(
        message.contains(
            "spec.valuesFrom: values come from Secret openstack-ccm-values-base key \
             hardened.yaml, which this run cannot see"
        ),
        "{message}"
    );
    assert!(!message.contains("default"), "{message}");
    // The optional override is not claimed missing.
    assert!(!message.contains("override"), "{message}");
    assert_eq!(report.exit_code(), 0);
}

#[test]
fn built_stream_on_stdin_resolves_the_secret() {
    let values = std::fs::read_to_string(
        root()
            .join(OPENCENTER)
            .join("helm-values/hardened-values-2.33.1.yaml"),
    )
    .expect("values");
    let release =
        std::fs::read_to_string(root().join(OPENCENTER).join("helmrelease.yaml")).expect("hr");
    // What `kustomize build` prints: the generated Secret with base64 data.
    let stream = |values: &str| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: openstack-ccm-values-base\n  \
             namespace: openstack-ccm\ntype: Opaque\ndata:\n  hardened.yaml: {}\n{release}",
            base64::engine::general_purpose::STANDARD.encode(values)
        )
    };
    let report = run(&["-"], &stream(&values));
    assert_eq!(messages(&report), Vec::new());

    let off = values.replace(
        "provider-requires-serial-api-calls: true",
        "provider-requires-serial-api-calls: false",
    );
    let report = run(&["-"], &stream(&off));
    let found = messages(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Level::Error);
    assert!(
        found[0].1.contains("is set to a false value")
            && found[0]
                .1
                .contains("Secret openstack-ccm-values-base key hardened.yaml, from <stdin>:1"),
        "{}",
        found[0].1
    );
}

#[test]
fn serial_off_in_the_generated_values_is_found_and_fix_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join(OPENCENTER), tmp.path());
    let values = tmp.path().join("helm-values/hardened-values-2.33.1.yaml");
    let text = std::fs::read_to_string(&values).expect("values");
    std::fs::write(
        &values,
        text.replace(
            "provider-requires-serial-api-calls: true",
            "provider-requires-serial-api-calls: false",
        ),
    )
    .expect("write");
    let before: Vec<String> = [
        "helmrelease.yaml",
        "helm-values/hardened-values-2.33.1.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(tmp.path().join(f)).expect("read"))
    .collect();
    let report = run(&[tmp.path().to_str().expect("UTF-8"), "--fix"], "");
    let found = messages(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Level::Error);
    assert!(
        found[0]
            .1
            .contains("helm-values/hardened-values-2.33.1.yaml"),
        "names the file the value is read from: {}",
        found[0].1
    );
    assert!(report.files.iter().all(|f| !f.written));
    let after: Vec<String> = [
        "helmrelease.yaml",
        "helm-values/hardened-values-2.33.1.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(tmp.path().join(f)).expect("read"))
    .collect();
    assert_eq!(before, after, "no file is edited from merged values");
    assert_eq!(report.exit_code(), 1);
}

const UMBRELLA: &str = "tests/fixtures/gitops/carriers/umbrella";

/// An umbrella chart's values hold the CCM's values under the subchart's key: read there,
/// fixed there (never a top-level `cloudConfig:` the umbrella ignores), and the rerun is
/// clean. The suffix glob `values.yaml` also matches Tempo's values file, which is left alone.
#[test]
fn umbrella_values_are_read_and_fixed_under_the_subchart_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join(UMBRELLA), tmp.path());
    let dir = tmp.path().to_str().expect("UTF-8");
    let flags = [
        dir,
        "--values-for",
        "openstack-cloud-controller-manager=values.yaml",
    ];
    let report = run(&flags, "");
    let found = messages(&report);
    assert!(
        found.iter().any(|(l, m)| *l == Level::Warning
            && m.contains(
                "openstack-cloud-controller-manager.cloudConfig: [LoadBalancer] \
                 provider-requires-serial-api-calls is not set"
            )),
        "{found:?}"
    );
    let tempo = report
        .files
        .iter()
        .find(|f| f.name.ends_with("charts/tempo/values.yaml"))
        .expect("tempo's values file is reported");
    assert!(
        tempo
            .skipped
            .as_deref()
            .is_some_and(|s| s.contains("directory of chart tempo")),
        "{:?}",
        tempo.skipped
    );
    let tempo_before =
        std::fs::read_to_string(tmp.path().join("charts/tempo/values.yaml")).expect("read");

    let mut fix = flags.to_vec();
    fix.push("--fix");
    let fixed = run(&fix, "");
    assert!(fixed.files.iter().any(|f| f.written));
    let values =
        std::fs::read_to_string(tmp.path().join("cluster-addon/values.yaml")).expect("read");
    let json = stackgate::yaml::parse_one(&values)
        .and_then(|n| n.to_json())
        .expect("the fixed file reads back");
    assert_eq!(
        json["openstack-cloud-controller-manager"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"],
        serde_json::json!(true)
    );
    assert!(
        json.get("cloudConfig").is_none(),
        "no top-level cloudConfig"
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("charts/tempo/values.yaml")).expect("read"),
        tempo_before
    );
    let again = run(&flags, "");
    assert_eq!(messages(&again), Vec::new());
    assert_eq!(again.exit_code(), 0);
}

const UMBRELLA_ALIAS: &str = "tests/fixtures/gitops/carriers/umbrella-alias";

/// An umbrella chart whose `Chart.yaml` gives the CCM dependency `alias: occm`: its values
/// file holds the CCM's values under `occm:` (a key named after the chart is not read). The
/// finding names that key, `--fix` writes there, and the rerun is clean.
#[test]
fn umbrella_dependency_alias_is_the_key_of_the_ccm_values() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join(UMBRELLA_ALIAS), tmp.path());
    let dir = tmp.path().to_str().expect("UTF-8");
    let flags = [
        dir,
        "--values-for",
        "openstack-cloud-controller-manager=cluster-stack/values.yaml",
    ];
    let report = run(&flags, "");
    let found = messages(&report);
    assert!(
        found.iter().any(|(l, m)| *l == Level::Warning
            && m.contains(
                "occm.cloudConfig: [LoadBalancer] provider-requires-serial-api-calls is not set"
            )),
        "{found:?}"
    );
    let path = tmp.path().join("cluster-stack/values.yaml");
    let before = std::fs::read_to_string(&path).expect("read");
    let mut fix = flags.to_vec();
    fix.push("--fix");
    let fixed = run(&fix, "");
    assert!(fixed.files.iter().any(|f| f.written));
    let values = std::fs::read_to_string(&path).expect("read");
    let json = stackgate::yaml::parse_one(&values)
        .and_then(|n| n.to_json())
        .expect("the fixed file reads back");
    assert_eq!(
        json["occm"]["cloudConfig"]["loadBalancer"]["provider-requires-serial-api-calls"],
        serde_json::json!(true)
    );
    // One line added; the decoy key is untouched.
    assert_eq!(values.lines().count(), before.lines().count() + 1);
    assert!(values.ends_with(
        "openstack-cloud-controller-manager:\n  cloudConfig:\n    loadBalancer:\n      \
         provider-requires-serial-api-calls: true\n"
    ));
    let again = run(&flags, "");
    assert_eq!(messages(&again), Vec::new());
    assert_eq!(again.exit_code(), 0);
}

const ARGO: &str = "tests/fixtures/gitops/carriers/argo-valuefiles";

/// Argo CD `helm.valueFiles` inside the repository: resolved when the file is an input
/// (valueFiles, then valuesObject, then parameters), said to be unseen when it is not.
#[test]
fn argo_value_files_are_resolved_from_the_run_or_said_to_be_unseen() {
    let dir = root().join(ARGO);
    let report = run(&[dir.to_str().expect("UTF-8")], "");
    assert_eq!(messages(&report), Vec::new());

    let app = dir.join("apps");
    let report = run(&[app.to_str().expect("UTF-8")], "");
    let found = messages(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Level::Warning);
    assert!(
        found[0].1.contains(
            "spec.source.helm.valueFiles: values come from value files values-prod.yaml of \
             spec.source, which this run cannot see"
        ),
        "{}",
        found[0].1
    );

    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&dir, tmp.path());
    let values = tmp
        .path()
        .join("charts/openstack-cloud-controller-manager/values-prod.yaml");
    let text = std::fs::read_to_string(&values).expect("read");
    std::fs::write(&values, text.replace("calls: true", "calls: false")).expect("write");
    let report = run(&[tmp.path().to_str().expect("UTF-8"), "--fix"], "");
    let found = messages(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, Level::Error);
    assert!(
        found[0]
            .1
            .contains("value file values-prod.yaml of spec.source, from ")
            && found[0]
                .1
                .contains("charts/openstack-cloud-controller-manager/values-prod.yaml, then"),
        "{}",
        found[0].1
    );
    assert!(report.files.iter().all(|f| !f.written));
}

/// The serial setting missing from every merged source: `--fix` adds it to the HelmRelease's
/// own `spec.values` (which Flux merges last), the generated values file is left alone, and
/// the rerun is clean.
#[test]
fn missing_serial_setting_is_fixed_in_the_helmrelease_own_values() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join(OPENCENTER), tmp.path());
    let values = tmp.path().join("helm-values/hardened-values-2.33.1.yaml");
    let text = std::fs::read_to_string(&values).expect("values");
    let without = text.replace("    provider-requires-serial-api-calls: true\n", "");
    assert_ne!(text, without);
    std::fs::write(&values, &without).expect("write");
    let dir = tmp.path().to_str().expect("UTF-8");
    let found = messages(&run(&[dir], ""));
    assert!(
        found.iter().any(|(l, m)| *l == Level::Warning
            && m.contains("is not set")
            && m.contains("--fix adds a missing setting to the object's own values")),
        "{found:?}"
    );
    let report = run(&[dir, "--fix"], "");
    assert!(report.files.iter().any(|f| f.written));
    assert_eq!(std::fs::read_to_string(&values).expect("read"), without);
    let release = std::fs::read_to_string(tmp.path().join("helmrelease.yaml")).expect("read");
    let json = stackgate::yaml::parse_one(&release)
        .and_then(|n| n.to_json())
        .expect("the fixed HelmRelease reads back");
    assert_eq!(
        json["spec"]["values"],
        serde_json::json!({"cloudConfig": {"loadBalancer": {"provider-requires-serial-api-calls": true}}})
    );
    assert_eq!(json["spec"]["valuesFrom"].as_array().map(Vec::len), Some(2));
    assert_eq!(messages(&run(&[dir], "")), Vec::new());
}

/// Issue 14: `cluster.name` set through a HelmChart's `spec.set` or an Argo CD parameter is
/// the name the chart passes to the CCM: no default-name warning, in either carrier.
#[test]
fn cluster_name_set_on_top_of_the_values_is_seen() {
    let chart = |set: &str| {
        format!(
            "apiVersion: helm.cattle.io/v1\nkind: HelmChart\nmetadata:\n  name: occm\n  \
             namespace: kube-system\nspec:\n  chart: openstack-cloud-controller-manager\n  \
             valuesContent: |-\n    cloudConfig:\n      loadBalancer:\n        \
             provider-requires-serial-api-calls: true\n{set}"
        )
    };
    let names = |report: &Report| rule_messages(report, |rule| rule == "cluster-name");
    let set = chart("  set:\n    cluster.name: prod-a\n");
    assert_eq!(names(&run(&["-"], &set)), Vec::new());
    let argo = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: occm\n  \
                namespace: argocd\nspec:\n  source:\n    chart: openstack-cloud-controller-manager\n    \
                helm:\n      parameters:\n      - name: cluster.name\n        value: prod-b\n";
    assert_eq!(names(&run(&["-"], argo)), Vec::new());
    // Without it, the default name is reported (the test can fail).
    let unset = chart("  set:\n    image.tag: v1.31.1\n");
    assert_eq!(names(&run(&["-"], &unset)).len(), 1);
}
