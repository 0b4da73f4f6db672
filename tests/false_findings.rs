//! Two false findings on real repositories (issue 33 item 8), each gone without losing the
//! true finding on the same input, through the webhook (`admission::handle`) and `check`:
//! - `cluster-name` on a CCM that runs no service controller: with `--controllers` naming
//!   only `cloud-node-lifecycle` (a DaemonSet's args, or the chart's `enabledControllers`)
//!   the CCM creates no load balancers, so their names cannot collide. The CCM's controllers
//!   are chosen as k8s.io/controller-manager `app/helper.go` `IsControllerEnabled` reads
//!   `--controllers` (the first entry naming the controller, or `-name`, decides; else `*`
//!   enables it); the service controller is `service` (k8s.io/cloud-provider names it
//!   `service-lb-controller` too).
//! - "`use-octavia`: the CCM no longer reads this key" where the CCM that reads the config is
//!   pinned to a release that still reads it (removed in v1.26.0): the version pinned in the
//!   same input (a reading container's image tag, the chart's `image.tag` or version) decides
//!   removed keys, as it decides keys a release does not read yet.

#[path = "support/review.rs"]
mod review;

use clap::Parser;
use serde_json::{Value, json};
use stackgate::admission::{self, Webhook};
use stackgate::check::{self, CheckOptions};
use stackgate::cli::CheckArgs;
use stackgate::engine::Engine;
use stackgate::metrics::Metrics;
use stackgate::policy::PolicySet;
use stackgate::report::Report;

const CCM: &str = "openstack-cloud-controller-manager";
const IMAGE: &str = "registry.k8s.io/provider-os/openstack-cloud-controller-manager";
const REMOVED: &str = "no longer reads this key";

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    args: CheckArgs,
}

fn engine() -> Engine {
    Engine::new(PolicySet::embedded().expect("embedded policies load"))
}

/// The validating webhook's message and warnings for a CREATE of `object`.
fn validate(object: &Value) -> String {
    let body = review::review_for(object, "false-findings");
    let reply = admission::handle(
        &engine(),
        Webhook::Validate,
        &serde_json::to_vec(&body).expect("encode"),
        &Metrics::new(),
    );
    assert_eq!(reply.status, 200);
    let response =
        serde_json::from_slice::<Value>(&reply.body).expect("review")["response"].clone();
    let mut text = response["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    for w in response["warnings"].as_array().into_iter().flatten() {
        text.push('\n');
        text.push_str(w.as_str().unwrap_or_default());
    }
    text
}

/// `stackgate check` of the objects (YAML on stdin): every finding as `rule: message`.
fn check_text(objects: &[Value]) -> String {
    let manifest: Vec<String> = objects.iter().map(Value::to_string).collect();
    let options = CheckOptions::from(
        &Cmd::try_parse_from(["check", "-"])
            .expect("valid flags")
            .args,
    );
    let report: Report = check::check(
        &options,
        &engine(),
        &mut manifest.join("\n---\n").as_bytes(),
    )
    .expect("check runs");
    report
        .files
        .iter()
        .flat_map(|f| &f.objects)
        .flat_map(|o| &o.items)
        .map(|i| format!("{}: {}\n", i.rule, i.message))
        .collect()
}

/// A CCM DaemonSet running `image_tag` with `args`, reading Secret `cloud-config`.
fn daemonset(image_tag: &str, args: &[&str]) -> Value {
    let mut argv = vec![
        "/bin/openstack-cloud-controller-manager",
        "--cloud-provider=openstack",
        "--cloud-config=/etc/config/cloud.conf",
    ];
    argv.extend_from_slice(args);
    json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "occm"}},
            "template": {"metadata": {"labels": {"app": "occm"}},
                "spec": {"containers": [{"name": "occm", "image": format!("{IMAGE}:{image_tag}"),
                    "args": argv,
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/config"}]}],
                    "volumes": [{"name": "cfg", "secret": {"secretName": "cloud-config"}}]}}}})
}

fn secret(config: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cloud-config", "namespace": "kube-system"},
        "stringData": {"cloud.conf": config}})
}

fn helm_release(version: &str, values: Value) -> Value {
    json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
        "metadata": {"name": "occm", "namespace": "kube-system"},
        "spec": {"interval": "5m", "chart": {"spec": {"chart": CCM, "version": version,
            "sourceRef": {"kind": "HelmRepository", "name": "cpo"}}},
            "values": values}})
}

const CONFIG: &str = "[Global]\nauth-url = https://k:5000/v3\n[LoadBalancer]\n\
                      provider-requires-serial-api-calls = true\n";

/// A DaemonSet whose `--controllers` runs no service controller gets no cluster-name
/// finding; the same DaemonSet running it (by default, `*`, or by name) still does.
#[test]
fn cluster_name_only_where_the_ccm_runs_the_service_controller() {
    for (args, warned) in [
        (&["--controllers=cloud-node-lifecycle"][..], false),
        (&["--controllers", "cloud-node,cloud-node-lifecycle"], false),
        (&["--controllers=*,-service"], false),
        (&["--controllers=-service-lb-controller,*"], false),
        (&[], true),
        (&["--controllers=*"], true),
        (&["--controllers=cloud-node-lifecycle,service"], true),
        (
            &[
                "--controllers=cloud-node-lifecycle",
                "--controllers=service",
            ],
            true,
        ),
        (&["--controllers=*,-route"], true),
    ] {
        let object = daemonset("v1.31.0", args);
        let webhook = validate(&object);
        assert_eq!(
            webhook.contains("cluster-name"),
            warned,
            "{args:?}: {webhook}"
        );
        let checked = check_text(&[object, secret(CONFIG)]);
        assert_eq!(
            checked.contains("cluster-name"),
            warned,
            "{args:?}: {checked}"
        );
    }
}

/// The chart's `enabledControllers` (its `--controllers`) decides the same for chart values.
#[test]
fn cluster_name_in_chart_values_follows_enabled_controllers() {
    let config = json!({"global": {"auth-url": "https://k:5000/v3"},
        "loadBalancer": {"provider-requires-serial-api-calls": true}});
    for (controllers, warned) in [
        (Some(json!(["cloud-node-lifecycle"])), false),
        (
            Some(json!(["cloud-node", "cloud-node-lifecycle", "route"])),
            false,
        ),
        (None, true),
        (
            Some(json!([
                "cloud-node",
                "cloud-node-lifecycle",
                "route",
                "service"
            ])),
            true,
        ),
        (Some(json!(["*"])), true),
    ] {
        let mut values = json!({"cloudConfig": config});
        if let Some(list) = &controllers {
            values["enabledControllers"] = list.clone();
        }
        let object = helm_release("2.31.1", values);
        let webhook = validate(&object);
        assert_eq!(
            webhook.contains("cluster-name"),
            warned,
            "{controllers:?}: {webhook}"
        );
        let checked = check_text(&[object]);
        assert_eq!(
            checked.contains("cluster-name"),
            warned,
            "{controllers:?}: {checked}"
        );
    }
}

/// `use-octavia` is read by CCM releases before v1.26.0: a config read by a pinned v1.24.0
/// CCM gets no "no longer reads" finding; one read by v1.26.0 still does.
#[test]
fn a_removed_key_is_judged_by_the_ccm_release_of_the_same_input() {
    let config = format!("{CONFIG}use-octavia = true\n");
    for (tag, reported) in [("v1.24.0", false), ("v1.25.3", false), ("v1.26.0", true)] {
        let checked = check_text(&[daemonset(tag, &[]), secret(&config)]);
        assert_eq!(checked.contains(REMOVED), reported, "{tag}: {checked}");
    }
    // The Secret alone: no release is known, the finding stays.
    assert!(check_text(&[secret(&config)]).contains(REMOVED));
    // Chart values: the chart's image.tag, or the chart version's appVersion.
    let values = |tag: Option<&str>| {
        let mut v = json!({"cloudConfig": {"global": {"auth-url": "https://k:5000/v3"},
            "loadBalancer": {"provider-requires-serial-api-calls": true, "use-octavia": true}}});
        if let Some(tag) = tag {
            v["image"] = json!({"tag": tag});
        }
        v
    };
    for (object, reported) in [
        (helm_release("2.31.1", values(Some("v1.24.0"))), false),
        (helm_release("2.31.1", values(None)), true),
        (helm_release("2.31.1", values(Some("v1.26.1"))), true),
    ] {
        let webhook = validate(&object);
        assert_eq!(
            webhook.contains("use-octavia"),
            reported,
            "{object}: {webhook}"
        );
        let checked = check_text(std::slice::from_ref(&object));
        assert_eq!(checked.contains(REMOVED), reported, "{object}: {checked}");
    }
}
