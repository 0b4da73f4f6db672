//! Issue 32: the object a CCM container reads as its `--cloud-config` is a cloud-config site
//! whatever its name. Each case is the real upstream `openstack-cloud-controller-manager`
//! chart (2.36.0) rendered by real Helm with values that move the config the CCM reads away
//! from the chart's own Secret (tests/fixtures/ccm-config-source/SOURCES in
//! tests/fixtures/SOURCES.md), plus the config object written on its own with
//! `provider-requires-serial-api-calls = false`:
//!
//! 1. `extraEnv` redefines `CLOUD_CONFIG` (the last definition wins);
//! 2. `controllerExtraArgs` adds a second `--cloud-config` (the last flag wins);
//! 3. `secret.enabled: false` and an `extraVolumes` ConfigMap at `/etc/config`;
//! 4. `secret.create: false` with `secret.name` (and the two real-repository names).
//!
//! Each goes through `check` of the rendered stream (denied at the object the CCM reads,
//! naming the reader), the webhook with the fact reduced from the rendered DaemonSet (denied
//! on `/validate`, patched on `/mutate`), and `check` without the config object (a note that
//! says what it cannot see, never silence).

#[path = "support/review.rs"]
mod review;

use std::path::Path;
use std::sync::Arc;

use clap::Parser;
use kube::core::{DynamicObject, GroupVersionKind};
use serde_json::{Value, json};
use stackgate::admission::{self, Webhook};
use stackgate::budget::Cancel;
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::{Engine, Facts};
use stackgate::facts::ccm_config::CcmConfigReads;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::report::{ItemKind, Level};
use stackgate::rules::ccm_workload::CcmMarkers;

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn fixture(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/ccm-config-source")
        .join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

/// `check` over the given files: every item as (level, kind, message).
fn check_files(files: &[(&str, String)]) -> Vec<(Level, ItemKind, String)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut argv = vec!["check".to_owned()];
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        argv.push(path.display().to_string());
    }
    let options = CheckOptions::from(&Cmd::try_parse_from(argv).expect("valid flags").args);
    let report =
        check::check(&options, &engine(), &mut std::io::empty()).expect("check runs on files");
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .map(|i| (i.level, i.kind, i.message.clone()))
        .collect()
}

/// The cases: rendered stream, the config object the CCM reads, and how findings name it.
const CASES: &[(&str, &str, &str)] = &[
    (
        "case1-extra-env",
        "occm-alt-false.yaml",
        "ConfigMap kube-system/occm-alt data[\"cloud.conf\"]",
    ),
    (
        "case2-extra-args",
        "occm-alt-false.yaml",
        "ConfigMap kube-system/occm-alt data[\"cloud.conf\"]",
    ),
    (
        "case3-secret-disabled",
        "occm-alt-false.yaml",
        "ConfigMap kube-system/occm-alt data[\"cloud.conf\"]",
    ),
    (
        "case4-secret-name",
        "secret-occm-cloud-config-false.yaml",
        "Secret kube-system/occm-cloud-config stringData[\"cloud.conf\"]",
    ),
    (
        "real-k0s-flux",
        "secret-os-cloud-credentials-false.yaml",
        "Secret kube-system/os-cloud-credentials stringData[\"cloud.conf\"]",
    ),
    (
        "real-k0rdent",
        "secret-openstack-cloud-config-false.yaml",
        "Secret kube-system/openstack-cloud-config stringData[\"cloud.conf\"]",
    ),
];

const READER: &str = "the CCM reads this config: DaemonSet \
                      kube-system/openstack-cloud-controller-manager container \
                      \"openstack-cloud-controller-manager\"";

#[test]
fn check_of_the_rendered_chart_denies_the_object_the_ccm_reads() {
    for (case, config, named) in CASES {
        let items = check_files(&[
            ("rendered.yaml", fixture(&format!("{case}.rendered.yaml"))),
            ("config.yaml", fixture(&format!("configs/{config}"))),
        ]);
        let denial = items.iter().find(|(level, kind, message)| {
            *level == Level::Error
                && *kind == ItemKind::Denial
                && message.starts_with(named)
                && message.contains("provider-requires-serial-api-calls is set to a false value")
        });
        let Some((_, _, message)) = denial else {
            panic!("{case}: no denial at {named}: {items:#?}");
        };
        assert!(message.contains(READER), "{case}: {message}");
        // The config the CCM reads is in the run: no note says it is missing.
        assert!(
            !items
                .iter()
                .any(|(_, _, m)| m.contains("which is not in this run")),
            "{case}: {items:#?}"
        );
    }
}

#[test]
fn check_without_the_config_object_says_it_cannot_see_it() {
    for (case, config, _) in CASES {
        let items = check_files(&[("rendered.yaml", fixture(&format!("{case}.rendered.yaml")))]);
        let config_name = fixture(&format!("configs/{config}"))
            .lines()
            .find_map(|l| l.trim().strip_prefix("name: ").map(str::to_owned))
            .expect("a name");
        assert!(
            items.iter().any(|(level, _, m)| *level == Level::Note
                && m.contains(&format!("kube-system/{config_name} key \"cloud.conf\""))
                && m.contains("which is not in this run")),
            "{case}: {items:#?}"
        );
    }
}

/// The `CcmConfigSource` fact of a rendered stream's DaemonSet, as `serve`'s watcher keeps it.
fn reads_of_rendered(case: &str) -> Arc<CcmConfigReads> {
    let text = fixture(&format!("{case}.rendered.yaml"));
    let mut reads = CcmConfigReads::default();
    let markers = CcmMarkers::new(&[], &[]);
    for doc in text.split("\n---") {
        let Ok(value) = serde_saphyr::from_str::<Value>(doc) else {
            continue;
        };
        if value["kind"] != "DaemonSet" {
            continue;
        }
        let object: DynamicObject = serde_json::from_value(value).expect("an object");
        reads.add_workload(
            &GroupVersionKind::gvk("apps", "v1", "DaemonSet"),
            &object,
            &markers,
        );
    }
    assert!(!reads.is_empty(), "{case}: the DaemonSet reads a config");
    Arc::new(reads)
}

fn webhook(engine: &Engine, which: Webhook, object: &Value, facts: &Facts) -> Value {
    let body = review::review_for(object, "ccm-config-source");
    let (reply, _) = admission::handle_with(
        engine,
        which,
        &serde_json::to_vec(&body).expect("encode"),
        &Metrics::new(),
        facts,
        &Cancel::never(),
    );
    assert_eq!(reply.status, 200);
    serde_json::from_slice::<Value>(&reply.body).expect("review")["response"].clone()
}

/// The config object as the apiserver hands it to admission (base64 `data`), with `ini`.
fn admitted(config: &str, ini: &str) -> Value {
    use base64::Engine as _;
    let value: Value = serde_saphyr::from_str(&fixture(&format!("configs/{config}"))).unwrap();
    let mut object = json!({"apiVersion": "v1", "kind": value["kind"],
        "metadata": value["metadata"], "data": {}});
    object["data"]["cloud.conf"] = if value["kind"] == "Secret" {
        json!(base64::engine::general_purpose::STANDARD.encode(ini))
    } else {
        json!(ini)
    };
    object
}

#[test]
fn the_webhook_with_the_fact_denies_false_and_adds_the_missing_line() {
    let engine = engine();
    for (case, config, named) in CASES {
        let facts = Facts::of_ccm_reads(reads_of_rendered(case));
        let off = admitted(
            config,
            "[Global]\nregion = RegionOne\n\n[LoadBalancer]\nprovider-requires-serial-api-calls = false\n",
        );
        let response = webhook(&engine, Webhook::Validate, &off, &facts);
        assert_eq!(response["allowed"], false, "{case}: {response}");
        let message = response["status"]["message"].as_str().unwrap_or("");
        let where_ = named.replace("stringData", "data");
        assert!(
            message.contains(&where_) && message.contains(READER),
            "{case}: {message}"
        );
        let missing = admitted(config, "[Global]\nregion = RegionOne\n");
        let response = webhook(&engine, Webhook::Mutate, &missing, &facts);
        assert_eq!(response["allowed"], true, "{case}: {response}");
        assert!(
            response["patch"].is_string(),
            "{case}: the missing line is added: {response}"
        );
        // Without the fact the object is not a site: nothing to say (the named sites stay).
        let response = webhook(&engine, Webhook::Validate, &off, &Facts::default());
        assert_eq!(response["allowed"], true, "{case}: {response}");
    }
}

#[test]
fn a_hostpath_config_is_said_to_be_unseen_on_the_workload() {
    let text = fixture("case4-secret-name.rendered.yaml").replace(
        "secret:\n          secretName: occm-cloud-config",
        "hostPath:\n          path: /etc/kubernetes",
    );
    assert!(text.contains("hostPath:\n          path: /etc/kubernetes"));
    let items = check_files(&[("rendered.yaml", text)]);
    assert!(
        items.iter().any(|(level, _, m)| *level == Level::Warning
            && m.contains("stackgate cannot see the cloud config this CCM reads")
            && m.contains("hostPath /etc/kubernetes")),
        "{items:#?}"
    );
}
