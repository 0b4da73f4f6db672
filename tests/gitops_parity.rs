//! The webhook and `stackgate check` give the same verdict on the same object.
//!
//! Every Kubernetes object of the GitOps fixture repository goes through `stackgate check`
//! and, as the AdmissionReview the apiserver would send for it, through the webhook's
//! admission handler (`/validate` and `/mutate`): same admission decision, same denial
//! messages, same warnings, same JSON Patch. Then `stackgate check --fix` writes the fixes,
//! and each fixed object equals the object with the webhook's patch applied, and passes the
//! webhook without a patch (idempotence). Plain values files have no webhook counterpart.

#[path = "support/review.rs"]
mod review;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use clap::Parser;
use serde_json::Value;
use stackgate::admission::{self, Webhook};
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::report::{ItemKind, Level};
use stackgate::yaml;

const REPO: &str = "tests/fixtures/gitops/repo";
const CARRIERS: &str = "tests/fixtures/gitops/carriers/parity";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn args(path: &Path, extra: &[&str]) -> CheckOptions {
    let mut argv = vec!["check".to_owned(), path.display().to_string()];
    // The plain values files of the fixture repository (a glob that matches nothing is a
    // usage error, so it is only given where such files exist).
    if path.join("clusters").is_dir() {
        argv.push("--values-for".to_owned());
        argv.push("openstack-cloud-controller-manager=clusters/*/occm-values.yaml".to_owned());
    }
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args)
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

fn webhook(engine: &Engine, which: Webhook, object: &Value) -> Value {
    let body = review::review_for(object, "parity");
    let reply = admission::handle(
        engine,
        which,
        &serde_json::to_vec(&body).expect("encode"),
        &Metrics::new(),
    );
    assert_eq!(reply.status, 200);
    serde_json::from_slice::<Value>(&reply.body).expect("review")["response"].clone()
}

/// The webhook's warning text for a finding (see `admission::short`).
/// The warning the webhook sends for a `check` item: `stackgate POLICY: <first line>`.
fn short(policy: &str, item: &stackgate::report::Item) -> String {
    let text = item
        .text
        .as_ref()
        .expect("a finding's item carries its parts");
    text.warning(policy)
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

/// The object in `file` with the same apiVersion, kind, namespace and name.
fn find_object(file: &Path, like: &Value) -> Value {
    let text = std::fs::read_to_string(file).expect("fixed file");
    let key = |v: &Value| {
        (
            v["apiVersion"].clone(),
            v["kind"].clone(),
            v["metadata"]["namespace"].clone(),
            v["metadata"]["name"].clone(),
        )
    };
    yaml::parse_stream(&text)
        .expect("fixed file parses")
        .iter()
        .filter_map(|d| d.root.to_json().ok())
        .find(|v| key(v) == key(like))
        .unwrap_or_else(|| panic!("{} lost the object", file.display()))
}

#[test]
fn webhook_and_check_agree_on_every_object_of_the_fixture_repository() {
    let (compared, patched) = parity(REPO);
    assert!(compared >= 6, "compared {compared} objects");
    assert!(patched >= 3, "patched {patched} objects");
}

/// The carriers of issue 14 (`tests/fixtures/gitops/carriers/parity`): RKE2 HelmChart
/// `spec.set`, k0s ClusterConfig chart values, Argo CD `helm.parameters`, an umbrella chart's alias, and a Flux HelmRelease
/// and an Argo CD Application whose `valuesFrom` objects and `valueFiles` neither face can see
/// (both warn the same way, neither edits).
/// Resolved `valuesFrom` (openCenter's layout) is `check`-only by design: the HelmRelease's
/// review does not hold the generated Secret; `tests/check_carriers.rs` covers it.
#[test]
fn webhook_and_check_agree_on_the_new_carriers() {
    let (compared, patched) = parity(CARRIERS);
    assert!(compared >= 12, "compared {compared} objects");
    assert!(patched >= 5, "patched {patched} objects");
}

/// Runs the comparison over every object of `repo`; returns how many objects were compared
/// and how many were patched.
fn parity(repo: &str) -> (usize, usize) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let engine = engine();
    let report = check::check(&args(&root.join(repo), &[]), &engine, &mut std::io::empty())
        .expect("check runs");
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&root.join(repo), tmp.path());
    let fixed_report = check::check(
        &args(tmp.path(), &["--fix"]),
        &engine,
        &mut std::io::empty(),
    )
    .expect("check --fix runs");
    let any_written = fixed_report.files.iter().any(|f| f.written);

    let mut compared = 0;
    let mut patched = 0;
    for file in &report.files {
        assert!(
            file.problems.is_empty(),
            "{}: {:?}",
            file.name,
            file.problems
        );
        for o in file
            .objects
            .iter()
            .filter(|o| !o.object.starts_with("values file "))
        {
            compared += 1;
            let what = format!("{} in {}", o.object, file.name);
            // Validate: decision, denial messages, warnings.
            let v = webhook(&engine, Webhook::Validate, &o.json);
            let cli_denials: Vec<&str> = o
                .items
                .iter()
                .filter(|i| i.kind == ItemKind::Denial)
                .map(|i| i.message.as_str())
                .collect();
            assert_eq!(v["allowed"], cli_denials.is_empty(), "{what}: allowed");
            assert_eq!(
                o.items.iter().any(|i| i.level == Level::Error),
                !cli_denials.is_empty()
            );
            if !cli_denials.is_empty() {
                let mut webhook_denials: Vec<&str> = v["status"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .split("\n\n")
                    .collect();
                let mut cli_sorted = cli_denials.clone();
                webhook_denials.sort_unstable();
                cli_sorted.sort_unstable();
                assert_eq!(webhook_denials, cli_sorted, "{what}: denial messages");
            }
            let mut webhook_warnings: Vec<String> = v["warnings"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|w| w.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let mut cli_warnings: Vec<String> = o
                .items
                .iter()
                .filter(|i| i.kind == ItemKind::Warning)
                .map(|i| short(&i.policy, i))
                .collect();
            webhook_warnings.sort();
            cli_warnings.sort();
            assert_eq!(webhook_warnings, cli_warnings, "{what}: warnings");

            // Mutate: the same JSON Patch.
            let m = webhook(&engine, Webhook::Mutate, &o.json);
            assert_eq!(m["allowed"], true, "{what}: mutation never denies");
            let webhook_patch: Value = match m["patch"].as_str() {
                Some(b64) => serde_json::from_slice(
                    &base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .expect("base64"),
                )
                .expect("JSON Patch"),
                None => Value::Array(Vec::new()),
            };
            assert_eq!(
                webhook_patch,
                serde_json::to_value(&o.verdict.patch).expect("patch"),
                "{what}: patch"
            );

            // The file `--fix` wrote holds exactly the mutated object, which the webhook
            // then admits without a further patch.
            if o.verdict.patch.is_empty() {
                continue;
            }
            patched += 1;
            assert!(o.fixable_in_place, "{what}: fixable in place");
            let mut expected = o.json.clone();
            json_patch::patch(&mut expected, &o.verdict.patch).expect("webhook patch applies");
            let rel = Path::new(&file.name)
                .strip_prefix(root.join(repo))
                .expect("inside the repo");
            let fixed = find_object(&tmp.path().join(rel), &o.json);
            assert_eq!(
                fixed, expected,
                "{what}: fixed file == webhook-mutated object"
            );
            let again = webhook(&engine, Webhook::Mutate, &fixed);
            assert!(again["patch"].is_null(), "{what}: idempotent");
        }
    }
    assert_eq!(
        any_written,
        patched > 0,
        "a file was fixed iff an object was patched"
    );
    (compared, patched)
}
