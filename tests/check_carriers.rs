//! `stackgate check` over the carriers of issue 14 (`tests/fixtures/gitops/carriers/`): Flux
//! `valuesFrom` resolved from the run's objects (openCenter's layout: a kustomize
//! `secretGenerator` next to the HelmRelease), and said to be unseen when it cannot be.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use clap::Parser;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::policy::PolicySet;
use stackgate::report::{Level, Report};

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
            && m.contains("[LoadBalancer] provider-requires-serial-api-calls is not set")
            && m.contains("\nAt openstack-cloud-controller-manager.cloudConfig.\n")),
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
            && m.contains("[LoadBalancer] provider-requires-serial-api-calls is not set")
            && m.contains("\nAt occm.cloudConfig.\n")),
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

const RKE2: &str = "tests/fixtures/gitops/carriers/rke2-helmchartconfig";

/// Every item of a run with the file it is reported in (the item's own, or its object's).
fn placed(report: &Report) -> Vec<(String, usize, String, Level, String)> {
    report
        .files
        .iter()
        .flat_map(|f| {
            f.objects.iter().flat_map(move |o| {
                o.items.iter().map(move |i| {
                    (
                        i.file.clone().unwrap_or_else(|| f.name.clone()),
                        i.line,
                        i.rule.clone(),
                        i.level,
                        i.message.clone(),
                    )
                })
            })
        })
        .collect()
}

/// The line of `needle` (1-based) in a fixture file.
fn line_of(path: &Path, needle: &str) -> usize {
    let text = std::fs::read_to_string(path).expect("read");
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle")
        + 1
}

/// A RKE2 HelmChart and its HelmChartConfig in one directory: evaluated merged (the
/// HelmChartConfig's values over the HelmChart's), the finding placed at the HelmChartConfig's
/// line, the HelmChartConfig not reported a second time, and `--fix` writes nothing (a fix in
/// the HelmChart would lose to the HelmChartConfig).
#[test]
fn helmchartconfig_serial_off_is_found_at_its_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join(RKE2), tmp.path());
    let config = tmp.path().join("helmchartconfig.yaml");
    let dir = tmp.path().to_str().expect("UTF-8");
    let before = std::fs::read_to_string(tmp.path().join("helmchart.yaml")).expect("read");
    let report = run(&[dir, "--fix"], "");
    let found = placed(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    let (file, line, rule, level, message) = &found[0];
    assert_eq!(rule, "serial-lb-api-calls");
    assert_eq!(*level, Level::Error);
    assert_eq!(file, config.to_str().expect("UTF-8"));
    assert_eq!(
        *line,
        line_of(&config, "provider-requires-serial-api-calls: false")
    );
    assert!(message.contains("is set to a false value"), "{message}");
    assert!(
        message.contains(
            "[this value is set by HelmChartConfig kube-system/openstack-cloud-controller-manager \
             spec.valuesContent at "
        ) && message.contains("merged as RKE2/k3s helm-controller merges them")
            && message.contains("stackgate check does not edit these merged values"),
        "{message}"
    );
    // The name the HelmChartConfig sets is unique: no cluster-name finding, no caveat.
    assert!(report.files.iter().all(|f| !f.written));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("helmchart.yaml")).expect("read"),
        before
    );
    assert_eq!(report.exit_code(), 1);
}

/// The HelmChartConfig turning serial calls on over a HelmChart without the setting: clean.
#[test]
fn helmchartconfig_serial_on_over_a_chart_without_it_is_clean() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join(RKE2), tmp.path());
    let config = tmp.path().join("helmchartconfig.yaml");
    let text = std::fs::read_to_string(&config).expect("read");
    std::fs::write(&config, text.replace("calls: false", "calls: true")).expect("write");
    let report = run(&[tmp.path().to_str().expect("UTF-8")], "");
    assert_eq!(placed(&report), Vec::new());
    assert_eq!(report.exit_code(), 0);
}

/// The HelmChart alone: what a HelmChartConfig may set is not claimed (today's caveat on the
/// cluster name), and the serial setting is reported missing in the HelmChart.
#[test]
fn helmchart_alone_keeps_the_caveat() {
    let file = root().join(RKE2).join("helmchart.yaml");
    let report = run(&[file.to_str().expect("UTF-8")], "");
    let names = rule_messages(&report, |rule| rule == "cluster-name");
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        names[0].1.contains(
            "unless a HelmChartConfig of the same name sets cluster.name, which this write does \
             not show"
        ),
        "{names:?}"
    );
    let found = messages(&report);
    assert!(
        found
            .iter()
            .any(|(l, m)| *l == Level::Warning && m.contains("is not set")),
        "{found:?}"
    );
    assert!(
        found.iter().all(|(_, m)| !m.contains("merged")),
        "{found:?}"
    );
}

/// Both objects on standard input (`kubectl kustomize | stackgate check -`): merged the same
/// way, the finding placed at the HelmChartConfig's line of the stream.
#[test]
fn helmchart_and_config_on_stdin_are_merged() {
    let chart = std::fs::read_to_string(root().join(RKE2).join("helmchart.yaml")).expect("read");
    let config =
        std::fs::read_to_string(root().join(RKE2).join("helmchartconfig.yaml")).expect("read");
    let stream = format!("{chart}\n---\n{config}");
    let report = run(&["-"], &stream);
    let found = placed(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    let line = stream
        .lines()
        .position(|l| l.contains("provider-requires-serial-api-calls: false"))
        .expect("line")
        + 1;
    assert_eq!((found[0].0.as_str(), found[0].1), ("<stdin>", line));
    assert_eq!(found[0].3, Level::Error);
}

/// A HelmChartConfig that sets neither the serial setting nor the name: the missing setting is
/// fixed in the HelmChart's valuesContent (re-resolving shows the merged values fixed), the
/// HelmChartConfig is left alone, and the rerun reports only the chart-default cluster name,
/// without the caveat (the HelmChartConfig is seen and does not set it).
#[test]
fn missing_serial_setting_is_fixed_in_the_helmchart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join(RKE2), tmp.path());
    let config = tmp.path().join("helmchartconfig.yaml");
    let text = std::fs::read_to_string(&config).expect("read");
    let plain = text
        .replace("    cluster:\n      name: rke2-prod\n", "")
        .replace(
            "      loadBalancer:\n        provider-requires-serial-api-calls: false\n",
            "      global:\n        region: RegionOne\n",
        );
    assert_ne!(plain, text);
    std::fs::write(&config, &plain).expect("write");
    let dir = tmp.path().to_str().expect("UTF-8");
    let report = run(&[dir, "--fix"], "");
    assert!(
        report
            .files
            .iter()
            .any(|f| f.written && f.name.ends_with("helmchart.yaml")),
        "{:?}",
        placed(&report)
    );
    assert_eq!(std::fs::read_to_string(&config).expect("read"), plain);
    let found = placed(&run(&[dir], ""));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].2, "cluster-name");
    assert!(
        found[0].4.contains("default cluster name \"kubernetes\"")
            && !found[0].4.contains("unless a HelmChartConfig"),
        "{found:?}"
    );
}

/// openCenter: the chart's default name is written in the generated values file, so the
/// cluster-name warning is placed there (the line of `name: kubernetes`), naming the Secret.
#[test]
fn opencenter_cluster_name_is_placed_in_the_values_file() {
    let dir = root().join(OPENCENTER);
    let report = run(&[dir.to_str().expect("UTF-8")], "");
    let found: Vec<_> = placed(&report)
        .into_iter()
        .filter(|p| p.2 == "cluster-name")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    let values = dir.join("helm-values/hardened-values-2.33.1.yaml");
    assert_eq!(found[0].0, values.to_str().expect("UTF-8"));
    assert_eq!(found[0].1, line_of(&values, "name: kubernetes"));
    assert_eq!(found[0].1, 154);
    assert!(
        found[0].4.contains(
            "[this value is set by Secret openstack-ccm-values-base key hardened.yaml at "
        ),
        "{found:?}"
    );
}

/// A HelmChart in a template is not checked, so its HelmChartConfig is checked on its own (not
/// silently folded into an object nobody evaluates).
#[test]
fn helmchartconfig_beside_a_templated_helmchart_is_checked_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root().join(RKE2), tmp.path());
    std::fs::rename(
        tmp.path().join("helmchart.yaml"),
        tmp.path().join("helmchart.yaml.tpl"),
    )
    .expect("rename");
    let report = run(&[tmp.path().to_str().expect("UTF-8")], "");
    let found = placed(&report);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].0.ends_with("helmchartconfig.yaml"), "{found:?}");
    assert!(
        found[0]
            .4
            .contains("HelmChartConfig kube-system/openstack-cloud-controller-manager")
            && !found[0].4.contains("merged as RKE2"),
        "{found:?}"
    );
    assert_eq!(found[0].3, Level::Error);
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
    // The default set through `spec.set` over a unique name in the values: reported at the
    // entry (line 16 of the stream), which wins over a HelmChartConfig too (no caveat).
    let over = chart("  set:\n    image.tag: v1.31.1\n    cluster.name: kubernetes\n").replace(
        "valuesContent: |-\n",
        "valuesContent: |-\n    cluster:\n      name: prod-a\n",
    );
    let report = run(&["-"], &over);
    let messages = names(&report);
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].1.contains("HelmChart kube-system/occm spec.set[\"cluster.name\"]: the CCM runs with the default cluster name"),
        "{messages:?}"
    );
    assert!(!messages[0].1.contains("HelmChartConfig"), "{messages:?}");
    let lines: Vec<usize> = report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .filter(|i| i.rule == "cluster-name")
        .map(|i| i.line)
        .collect();
    assert_eq!(lines, vec![16], "{over}");
}
